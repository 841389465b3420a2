"""Plan one txid's ranges across partitions under a per-partition and a per-batch cap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import PartitionedEmitter, PlansInBulk


@dataclass(frozen=True, slots=True)
class Caps:
    """At most ``per_partition`` offsets from one partition and ``per_batch`` in all, per txid."""

    per_partition: int = 50_000
    per_batch: int = 500_000

    def __post_init__(self) -> None:
        if self.per_partition < 1 or self.per_batch < 1:
            msg = "caps must be >= 1"
            raise ValueError(msg)


def plan_batch(txid: int, partitions: Sequence[Partition], emitter: PartitionedEmitter,
               last: BatchPlan | None, caps: Caps) -> BatchPlan:
    """The plan of ``txid``: each partition continues from its range in ``last`` (the last committed plan).

    Partitions are visited from a starting point that rotates with the txid, so a total cap
    cannot starve the same partitions batch after batch. A partition of ``last`` that is not
    listed now (its topic missing or deleted, a pattern no longer matching it) keeps its position:
    it is carried as an empty range at its next offset, so no number of txids without it ever
    forgets where it stood (only a rewind does; docs/design.md). An emitter that
    :class:`~spouts.protocols.PlansInBulk` fetches for all the partitions at once first.
    """
    ordered = sorted(partitions)
    if ordered:
        shift = txid % len(ordered)
        ordered = ordered[shift:] + ordered[:shift]
    budget = caps.per_batch
    metas: dict[Partition, PartitionMetadata] = {}
    scope: AbstractContextManager[None] = emitter.planning(ordered) if isinstance(emitter, PlansInBulk) else nullcontext()
    with scope:
        for p in ordered:
            prev = last.partitions.get(p) if last else None
            allowance = min(caps.per_partition, budget)
            meta = emitter.plan_partition(p, prev, allowance) if allowance > 0 else (prev.empty_after() if prev else None)
            if meta is None:
                continue
            if meta.next_offset - meta.first_offset > allowance:
                msg = f"emitter planned past its cap on {p.id}: {meta}"
                raise AssertionError(msg)
            budget -= meta.next_offset - meta.first_offset
            metas[p] = meta
    return BatchPlan(txid, {**carried(last, metas), **metas})


def carried(last: BatchPlan | None, planned: Mapping[Partition, PartitionMetadata]) -> dict[Partition, PartitionMetadata]:
    """The partitions of ``last`` that ``planned`` leaves out, each as an empty range at its position."""
    if last is None:
        return {}
    return {p: m.empty_after() for p, m in last.partitions.items() if p not in planned}
