"""Plan one txid's ranges across partitions under a per-partition and a per-batch cap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import PartitionedEmitter


@dataclass(frozen=True, slots=True)
class Caps:
    """At most ``per_partition`` offsets from one partition and ``per_batch`` in all, per txid."""

    per_partition: int = 50_000
    per_batch: int = 500_000

    def __post_init__(self) -> None:
        if self.per_partition < 1 or self.per_batch < 1:
            raise ValueError("caps must be >= 1")


def plan_batch(txid: int, partitions: Sequence[Partition], emitter: PartitionedEmitter,
               last: BatchPlan | None, caps: Caps) -> BatchPlan:
    """The plan of ``txid``: each partition continues from its range in ``last`` (the last committed plan).

    Partitions are visited from a starting point that rotates with the txid, so a total cap
    cannot starve the same partitions batch after batch. Partitions no longer listed leave.
    """
    ordered = sorted(partitions)
    if ordered:
        shift = txid % len(ordered)
        ordered = ordered[shift:] + ordered[:shift]
    budget = caps.per_batch
    metas: dict[Partition, PartitionMetadata] = {}
    for p in ordered:
        prev = last.partitions.get(p) if last else None
        allowance = min(caps.per_partition, budget)
        if allowance > 0:
            meta = emitter.plan_partition(p, prev, allowance)
        else:
            meta = prev.empty_after() if prev else None
        if meta is None:
            continue
        if meta.next_offset - meta.first_offset > allowance:
            raise AssertionError(f"emitter planned past its cap on {p.id}: {meta}")
        budget -= meta.next_offset - meta.first_offset
        metas[p] = meta
    return BatchPlan(txid, metas)
