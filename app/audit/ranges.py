"""Which source ranges an audit recounts, and what makes an audit impossible (refused in one line).

A full audit reads, per partition, from the first offset the pipeline ever covered
(:class:`app.coordinator.progress.FirstOffsets`) to the end frozen for the audited txid ``T``; ``--since M``
reads from M's frozen ends instead. Both need the stored plans of those txids, and the source must
still hold every offset to read.

A partition whose positions moved onto a new log (re-created or truncated, read from its new start
under ``data_loss: skip``) cannot be recounted from before the move: the state holds what the old log
added, which the new log does not have, and new-log offsets say nothing about old-log records. A txid
whose range does not start where the partition's previous range ended is such a move (a rewind's
moves are refused by their own rule), and so is one whose topic id differs from the previous range's: a full
audit across it is refused, naming it, and ``--since``
the txid before it covers the new log from its start.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.coordinator.progress import ProgressLog, StoredBatch, read_rewinds
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from states.protocols import TransactionalStateStore


class AuditRefusedError(Exception):
    """What cannot be audited, said in one line (the command exits 2)."""


@dataclass(frozen=True, slots=True)
class AuditRanges:
    """The ranges to recount (as one plan, txid ``at``), the txid they start after (0: the beginning), and the
    ranges of topics the config no longer reads (left out of the recount: what they added is a difference)."""

    at: int
    since: int
    plan: BatchPlan
    left_out: tuple[PartitionMetadata, ...] = field(default=())


def topics_read(spout_config: Any) -> Callable[[str], bool]:
    """Whether the config reads a topic now: one of its ``topics``, or a match of its ``topic_pattern``
    (any topic for a spout without either)."""
    topics = tuple(getattr(spout_config, "topics", ()) or ())
    pattern = getattr(spout_config, "topic_pattern", None)
    if topics:
        return frozenset(topics).__contains__
    if pattern is not None:
        compiled = re.compile(pattern)
        return lambda t: not t.startswith("__") and compiled.fullmatch(t) is not None
    return lambda _: True


def choose(store: TransactionalStateStore, log: ProgressLog, *, at: int | None, since: int | None,
           topology_id: str, reads: Callable[[str], bool] = lambda _: True) -> AuditRanges:
    """The ranges of an audit of committed txid ``at`` (None: the last committed), from the first offsets or
    after txid ``since``, of the topics the config ``reads`` now (the rest are left out, see :class:`AuditRanges`)."""
    committed = log.committed().txid
    if committed == 0:
        msg = "nothing committed yet: there is nothing to audit"
        raise AuditRefusedError(msg)
    t = committed if at is None else at
    if not 0 < t <= committed:
        msg = f"--at txid {t}: the committed txids are 1..{committed}"
        raise AuditRefusedError(msg)
    end = _plan(log, t, "--at")
    starts = _since_starts(store, log, since, t) if since is not None else _first_starts(store, log, t, end)
    metas: dict[Partition, PartitionMetadata] = {}
    left_out: list[PartitionMetadata] = []
    for p, m in sorted(end.partitions.items()):
        start = starts.get(p, m.next_offset if since is None else 0)
        start = min(start, m.next_offset)
        meta = PartitionMetadata(p.topic, p.partition, start, m.next_offset, m.next_offset - start, topology_id)
        if reads(p.topic):
            metas[p] = meta
        elif not meta.empty:
            left_out.append(meta)
    return AuditRanges(t, since or 0, BatchPlan(t, metas), tuple(left_out))


def _since_starts(store: TransactionalStateStore, log: ProgressLog, since: int, t: int) -> dict[Partition, int]:
    """Where ``--since`` reads each partition from: ``since``'s frozen ends, or the start of the new log a move
    at ``since + 1`` read from."""
    if not 0 < since < t:
        msg = f"--since txid {since}: must be a committed txid below {t}"
        raise AuditRefusedError(msg)
    starts = {p: m.next_offset for p, m in _plan(log, since, "--since").partitions.items()}
    following = log.batch(since + 1)
    if following is not None:
        starts.update({p: m.first_offset for p, m in following.plan.partitions.items()})
    _refuse_moves(log, store, since + 1, t)
    return starts


def _first_starts(store: TransactionalStateStore, log: ProgressLog, t: int, end: BatchPlan) -> dict[Partition, int]:
    """Where a full audit reads each partition from: the first offset the pipeline covered, unless that cannot
    be known, a rewind or a move onto a new log came since."""
    first = log.first_offsets()
    if first is None or first.since_txid > 1:
        where = "" if first is None else f" (recorded from txid {first.since_txid} on)"
        msg = (
            f"the first offsets of the pipeline are not known{where}: audit what later txids "
            f"added with --since txid M (txids {_stored(log)} still have their plans)"
        )
        raise AuditRefusedError(msg)
    rewound = [int(r["txid"]) for r in read_rewinds(store) if int(r.get("txid", 0)) <= t]
    if rewound:
        msg = (
            f"a rewind at txid {max(rewound)} moved the positions, so records may be read "
            f"twice on purpose: audit after it with --since txid {max(rewound)}"
        )
        raise AuditRefusedError(msg)
    _refuse_moves(log, store, 1, t)
    starts = dict(first.offsets)
    behind = sorted(p for p, o in starts.items() if p in end.partitions and end.partitions[p].next_offset < o)
    if behind:
        where = ", ".join(f"{p.id} (first offset {starts[p]}, txid {t} ends at {end.partitions[p].next_offset})"
                          for p in behind)
        msg = (f"positions moved onto a new log before the stored plans: {where}; the state holds what the old "
               "log added, which cannot be recounted: audit a later txid's additions with --since txid M")
        raise AuditRefusedError(msg)
    return starts


def _refuse_moves(log: ProgressLog, store: TransactionalStateStore, first: int, last: int) -> None:
    """Refuse when a txid above ``first`` up to ``last`` moved a partition onto a new log (see the module
    docstring), naming the last such move and the ``--since`` that covers what came after it."""
    rewound = {int(r["txid"]) for r in read_rewinds(store)}
    ends: dict[Partition, PartitionMetadata] = {}
    moves: list[tuple[int, Partition, int, int]] = []
    for txid in (x for x in log.batch_txids() if x <= last):
        stored = log.batch(txid)
        if stored is None:
            continue
        for p, m in sorted(stored.plan.partitions.items()):
            before = ends.get(p)
            if before is not None and _moved(before, m) and txid > first and txid not in rewound:
                moves.append((txid, p, before.next_offset, m.first_offset))
            ends[p] = m
    if moves:
        txid, p, ended, started = moves[-1]
        msg = (f"{p.id} moved onto a new log at txid {txid} (from offset {ended} to {started}: re-created or "
               f"truncated, read from its new start under data_loss: skip); the state holds what the old log "
               f"added, which cannot be recounted: audit what came after with --since txid {txid - 1}")
        raise AuditRefusedError(msg)


def _moved(before: PartitionMetadata, after: PartitionMetadata) -> bool:
    """Whether ``after`` reads another log than ``before`` ended in: it does not start where ``before`` ended, or
    both name their topic's id and the ids differ (a re-created topic whose offsets happen to line up)."""
    ids = (before.topic_id, after.topic_id)
    return after.first_offset != before.next_offset or (None not in ids and ids[0] != ids[1])


def check_held(ranges: AuditRanges, log_starts: Mapping[Partition, int], log: ProgressLog) -> None:
    """Refuse when the source no longer holds the start of a range (retention, a truncated or re-created log),
    naming the partitions and what ``--since`` can still cover."""
    gone = [(p, m.first_offset, log_starts[p]) for p, m in sorted(ranges.plan.partitions.items())
            if not m.empty and p in log_starts and log_starts[p] > m.first_offset]
    if not gone:
        return
    where = ", ".join(f"{p.id} needs offset {first} but starts at {low}" for p, first, low in gone)
    coverable = [t for t in log.batch_txids() if t < ranges.at and _holds(log.batch(t), gone)]
    hint = f"--since txid {coverable[0]} is the earliest that can still be audited" if coverable else \
        "no stored txid's ranges are still held: no --since can cover them"
    msg = f"the source no longer holds the ranges to recount ({where}); {hint}"
    raise AuditRefusedError(msg)


def _holds(stored: StoredBatch | None, gone: list[tuple[Partition, int, int]]) -> bool:
    """Whether the source still holds everything after ``stored``'s ends in the partitions of ``gone``."""
    return stored is not None and all(p in stored.plan.partitions and stored.plan.partitions[p].next_offset >= low
                                      for p, _, low in gone)


def _plan(log: ProgressLog, txid: int, option: str) -> BatchPlan:
    stored = log.batch(txid)
    if stored is None:
        msg = (
            f"{option} txid {txid}: its plan is no longer stored (plans are kept for the "
            f"retention window; stored: txids {_stored(log)})"
        )
        raise AuditRefusedError(msg)
    return stored.plan


def _stored(log: ProgressLog) -> str:
    txids = log.batch_txids()
    return f"{txids[0]}..{txids[-1]}" if txids else "none"
