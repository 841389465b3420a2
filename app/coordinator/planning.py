"""What a txid's plan says before it runs: nothing new to read, a frozen plan checked against retention, its line."""

from __future__ import annotations

import logging

from spouts.metadata import BatchPlan
from spouts.protocols import PartitionedEmitter

log = logging.getLogger("app.coordinator")  # the coordinator's lines, under the name operators filter on


def same_position(plan: BatchPlan, last: BatchPlan | None) -> bool:
    """True when ``plan`` reads nothing and changes no partition's position: nothing to commit."""
    if plan.offset_count:
        return False
    before = {} if last is None else {p: m.next_offset for p, m in last.partitions.items()}
    return {p: m.next_offset for p, m in plan.partitions.items()} == before


def replan_frozen(topology_id: str, emitter: PartitionedEmitter, plan: BatchPlan) -> BatchPlan:
    """``plan``, unless retention removed offsets of it: then policy fail raises DataLossError and
    skip keeps what is left (stored, fenced, before the replay reads it)."""
    checked = {p: emitter.replan_frozen(m) for p, m in plan.partitions.items()}
    if checked == dict(plan.partitions):
        return plan
    lost = plan.offset_count - sum(m.next_offset - m.first_offset for m in checked.values())
    log.warning("pipeline %s: retention removed %d offsets of frozen txid %d before it committed; replaying "
                "what is left (the lost records are counted once, if an earlier attempt wrote them, or not "
                "at all)", topology_id, lost, plan.txid)
    return BatchPlan(plan.txid, checked)


def log_planned(topology_id: str, plan: BatchPlan, attempt: int) -> None:
    """The txid's line as it is planned: records and partitions (a replay: its first one at INFO, later at
    DEBUG, each failure having its own line)."""
    read = sum(1 for m in plan.partitions.values() if m.next_offset > m.first_offset)
    replay = f" (attempt {attempt}, its frozen plan)" if attempt > 1 else ""
    log.log(logging.DEBUG if attempt > 2 else logging.INFO, "pipeline %s txid %d: planned %d records from %d of "
            "%d partitions%s", topology_id, plan.txid, plan.offset_count, read, len(plan.partitions), replay)
