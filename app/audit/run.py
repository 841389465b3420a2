"""One audit of a pipeline: choose the ranges, recount them on Spark, compare each table as of the txid.

Every key is compared. A key written again by a txid ``S`` above ``T + 1`` while the audit runs (the
service kept writing) is compared as of ``S - 1`` instead: an opaque value ``(curr, prev, S)`` keeps
``prev``, its value before ``S``, and the recount of ``T+1..S-1`` for that key, on top of its value as
of ``T``, must equal it. Where that cannot be known (a transactional value keeps no ``prev``, the plans
of those txids rotated out) the key is reported skipped with the reason, never as a difference.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.audit.compare import Key, KeyResult, Outcome, SinkAudit, Snapshot, against, compare, sampled, snapshot
from app.audit.dead_letters import DeadLetterCheck, check, kafka_of, read_letters
from app.audit.ranges import AuditRanges, AuditRefusedError, check_held, choose, topics_read
from app.audit.recount import Recounter
from app.coordinator.progress import ProgressLog, read_rewinds
from app.kafka_offsets import KafkaOffsets
from app.topology.key_text import parse_key
from app.topology.topology import PartitionPersist
from spouts.bad_records import BadRecord
from spouts.metadata import Partition, PartitionMetadata
from states.aggregators import combine_updater
from states.asof import AsOf, Known
from states.layout import Row
from states.spec import StateKind
from states.values import OpaqueValue


@dataclass
class AuditReport:
    """What an audit found (``python -m app audit`` prints it, ``--json`` as this document)."""

    pipeline: str
    at: int
    since: int
    ranges: list[dict[str, Any]]
    left_out: list[dict[str, Any]] = field(default_factory=list)  # ranges of topics the config no longer reads
    records: int = 0
    bad_records: dict[str, int] = field(default_factory=dict)  # by stage
    bad_records_policy: str = ""
    tables: list[SinkAudit] = field(default_factory=list)
    recount_s: float = 0.0
    compare_s: float = 0.0
    reread_at: list[int] = field(default_factory=list)  # later txids keys written again since were compared as of
    dead_letters: DeadLetterCheck | None = None

    @property
    def differences(self) -> int:
        letters = self.dead_letters.differences if self.dead_letters is not None else 0
        return sum(t.differences for t in self.tables) + letters

    def to_json(self, limit: int = 1000) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "at_txid": self.at, "since_txid": self.since, "ranges": self.ranges,
                "left_out": self.left_out,
                "records": self.records, "bad_records": {"policy": self.bad_records_policy, **self.bad_records,
                                                         "total": sum(self.bad_records.values())},
                "reread_at_txids": self.reread_at, "recount_s": round(self.recount_s, 3),
                "compare_s": round(self.compare_s, 3), "differences": self.differences,
                "dead_letters": self.dead_letters.to_json(limit) if self.dead_letters is not None else None,
                "tables": [{"table": t.table, "checked": t.checked, **{o.value: n for o, n in t.counts.items()},
                            "keys": [{"key": list(k.key), "outcome": k.outcome.value, "expected": k.expected,
                                      "stored": k.stored, "stored_txid": k.stored_txid, "reason": k.reason}
                                     for k in t.keys[:limit]]} for t in self.tables]}


def audit(config: Any, compiled: Any, start_spark: Callable[[], Any], *, at: int | None = None, since: int | None = None,
          sink: str | None = None, keys: Sequence[str] | None = None, sample: float | None = None,
          log_starts: Callable[[Sequence[Partition]], dict[Partition, int]],
          progress: Callable[[str], None] = lambda _: None) -> AuditReport:
    """Audit ``compiled`` (a :class:`app.config.CompiledPipeline`); ``start_spark`` gives the Spark session (started
    once nothing is refused); ``log_starts`` each partition's log start now (Kafka's low watermark). Raises
    :class:`AuditRefusedError` for what cannot be audited."""
    topology = compiled.topology
    sinks = [s for _, s in topology.sinks if sink in (None, s.name)]
    if not sinks:
        names = ", ".join(s.name for _, s in topology.sinks)
        msg = f"--sink {sink!r}: pipeline {compiled.id} writes no such table (tables: {names})"
        raise AuditRefusedError(msg)
    for s in sinks:
        if isinstance(s, PartitionPersist):
            msg = (
                f"table {s.name}: a partition_persist sink is written by a user function, not an "
                "aggregate, so it cannot be recounted"
            )
            raise AuditRefusedError(msg)
        if s.factory.kind is StateKind.NON_TRANSACTIONAL:
            msg = (
                f"table {s.name}: a non-transactional state keeps no txid per key, so its values "
                "cannot be read as of a txid (use an opaque or transactional state)"
            )
            raise AuditRefusedError(msg)
    store = compiled.store()
    log = ProgressLog(store, epoch=-1)  # read only
    reads = topics_read(getattr(topology.spout, "config", None))
    ranges = choose(store, log, at=at, since=since, topology_id=compiled.id, reads=reads)
    check_held(ranges, log_starts(sorted(ranges.plan.partitions)), log)
    recounter = Recounter(start_spark(), topology, compiled.id)  # the tables' specs, no job yet
    if at is None:  # the service may have committed more while Spark started: audit the last one
        log = ProgressLog(store, epoch=-1)  # a log lists the plans stored when it is made
        ranges = choose(store, log, at=at, since=since, topology_id=compiled.id, reads=reads)
        check_held(ranges, log_starts(sorted(ranges.plan.partitions)), log)
    report = AuditReport(compiled.id, ranges.at, ranges.since, _ranges_json(ranges.plan.partitions.values()),
                         left_out=_ranges_json(ranges.left_out),
                         bad_records_policy=topology.errors.action.value)
    keep = sampled(sample) if sample is not None else None
    audited = [c for c in recounter.sinks if c.sink in sinks]
    started = time.monotonic()
    snapshots = {}
    for c in audited:  # read the stored keys first, as close to choosing the txid as can be
        chosen = [parse_key(c.spec, k) for k in keys] if keys else None
        progress(f"reading table {c.spec.table} as of txid {ranges.at}")
        snapshots[c.sink.name] = snapshot(c.spec, _backing(c), c.sink.factory, at=ranges.at, since=ranges.since,
                                          keys=chosen, keep=keep)
    report.compare_s = time.monotonic() - started
    progress(f"recounting {ranges.plan.offset_count} offsets of {len(ranges.plan.partitions)} partitions "
             f"(txids {ranges.since + 1}..{ranges.at}) on Spark")
    started = time.monotonic()
    counted = recounter.count(ranges.plan)
    report.recount_s = time.monotonic() - started
    report.records = counted.records
    report.bad_records = dict(Counter(b.stage.value for b in counted.bad_records))
    report.dead_letters = _dead_letters(compiled, ranges, counted.bad_records, progress)
    progress(f"recounted {counted.records} records in {report.recount_s:.1f} s; comparing as of txid {ranges.at}")
    started = time.monotonic()
    shared = _Shared(store, log, recounter, reads, keep, report, progress)
    for s in counted.sinks:
        if s.compiled.sink in sinks:
            report.tables.append(_compare(shared, s.compiled, s.partials, snapshots[s.compiled.sink.name]))
    report.compare_s += time.monotonic() - started
    return report


def log_starts_of(config: Any, pipeline: Any) -> Callable[[Sequence[Partition]], dict[Partition, int]]:
    """Each partition's log start now (Kafka's low watermark), asked of the cluster ``pipeline`` reads."""
    from app.config import spout_config

    def starts(partitions: Sequence[Partition]) -> dict[Partition, int]:
        with KafkaOffsets(spout_config(config, pipeline), pipeline.id) as kafka:
            return {p: low for p, (low, _) in kafka.watermarks(partitions).items()}

    return starts


def _dead_letters(compiled: Any, ranges: AuditRanges, bad: Sequence[BadRecord],
                  progress: Callable[[str], None]) -> DeadLetterCheck:
    """The recount's bad records against the pipeline's dead-letter topic (when its policy has one)."""
    policy = compiled.topology.errors
    coords = [(b.topic, b.partition, b.offset) for b in bad]
    if policy.topic is None:
        return check(policy.action.value, None, coords, plan=ranges.plan, letters=Counter(), log_start={})
    progress(f"reading dead-letter topic {policy.topic}")
    letters, log_start = read_letters(kafka_of(compiled.topology.spout), policy.topic, compiled.id)
    return check(policy.action.value, policy.topic, coords, plan=ranges.plan, letters=letters, log_start=log_start,
                 rewound=bool(read_rewinds(compiled.store())))


def _backing(c: Any) -> Any:
    return c.sink.factory.backing_map(c.spec, create=False)


@dataclass(frozen=True, slots=True)
class _Shared:
    """What the comparison of every table of one audit uses."""

    store: Any
    log: ProgressLog
    recounter: Recounter
    reads: Callable[[str], bool]
    keep: Callable[[Key], bool] | None
    report: AuditReport
    progress: Callable[[str], None]


def _compare(a: _Shared, c: Any, partials: dict[Key, Any], snap: Snapshot) -> SinkAudit:
    """``c``'s table against the recount as of ``snap.at``; a key a later txid ``S`` wrote again meanwhile (two or
    more txids after the audited one) is compared as of ``S - 1`` from the ``prev`` stored with it."""
    result = compare(snap, c.aggregator, _backing(c), partials, keep=a.keep)
    moved: dict[int, list[tuple[Row, KeyResult]]] = {}
    for kr, r in _moved_on(snap, result):
        stored = snap.stored.get(kr)
        if not isinstance(stored, OpaqueValue):
            result.replace(r, dataclasses.replace(r, reason=(
                f"written by txid {r.stored_txid} since, and a transactional value keeps no value from before it: "
                f"its value as of txid {snap.at} cannot be known")))
            continue
        moved.setdefault(stored.txid, []).append((kr, r))
    for later, keys in sorted(moved.items()):
        _as_of_prev(a, c, snap, later, keys=keys, result=result)
    return result


def _moved_on(snap: Snapshot, result: SinkAudit) -> list[tuple[Row, KeyResult]]:
    """The skipped keys whose value as of ``snap.at`` is unknown only because later txids wrote them again."""
    layout = snap.layout
    return [(kr, r) for r in result.keys if r.outcome is Outcome.SKIPPED
            and snap.now.get(kr := layout.key_row(r.key)) is not None and snap.now[kr].known is Known.MOVED_ON
            and snap.then[kr].known is Known.VALUE]


def _as_of_prev(a: _Shared, c: Any, snap: Snapshot, later: int, *, keys: list[tuple[Row, KeyResult]],
                result: SinkAudit) -> None:
    """Compare ``keys`` (each stored by txid ``later`` > T + 1) as of ``later - 1``: their stored ``prev`` against
    their value as of T (already recounted) plus what txids T+1..later-1 read for them."""
    before = later - 1
    try:
        delta = choose(a.store, ProgressLog(a.store, epoch=-1), at=before, since=snap.at,
                       topology_id=a.recounter.pipeline, reads=a.reads)
    except AuditRefusedError as e:
        for _, r in keys:
            result.replace(r, dataclasses.replace(r, reason=(
                f"written by txid {later} since; its value before it (as of txid {before}) cannot be recounted: {e}")))
        return
    wanted = {r.key for _, r in keys}
    a.progress(f"table {c.spec.table}: {len(keys)} keys written again by txid {later}; comparing them as of txid "
               f"{before} (recounting txids {snap.at + 1}..{before})")
    counted = a.recounter.count(delta.plan, keep=wanted.__contains__)
    partials = next((s.partials for s in counted.sinks if s.compiled.sink is c.sink), {})
    for kr, r in keys:
        expected = combine_updater(c.aggregator, partials[r.key])(r.expected) if r.key in partials else r.expected
        stored = snap.stored[kr]
        found = against(snap.layout, r.key, expected, AsOf(Known.VALUE, stored.prev, stored.txid))
        result.replace(r, None if found is None else dataclasses.replace(
            found, reason=f"compared as of txid {before}: the value stored before txid {later} (prev)"))
    if before not in a.report.reread_at:
        a.report.reread_at.append(before)
        a.report.reread_at.sort()


def _ranges_json(metas: Iterable[PartitionMetadata]) -> list[dict[str, Any]]:
    return [{"partition": f"{m.topic}:{m.partition}", "from_offset": m.first_offset, "to_offset": m.next_offset}
            for m in sorted(metas, key=lambda m: (m.topic, m.partition))]


__all__ = ["AuditRefusedError", "AuditReport", "audit", "log_starts_of"]
