"""Typed partition metadata and batch plans, with a stable JSON serialisation.

Offsets follow Kafka: ``first_offset`` is the first offset a batch reads, ``next_offset`` the one
after the last (exclusive), so an empty range has ``first_offset == next_offset``. The trap: the
next batch starts at ``next_offset`` of the last *committed* batch, never ``next_offset + 1``.
A range also names the log its offsets belong to, by the topic's id where the source has one
(``topic_id``: Kafka's, new when a topic is re-created): offsets of one log mean nothing in another.
Metadata stored without it (older versions, sources without ids) loads with ``topic_id`` None.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True, order=True)
class Partition:
    """A topic partition; ``id`` (``topic:partition``) is how it is named in stored metadata."""

    topic: str
    partition: int

    @property
    def id(self) -> str:
        return f"{self.topic}:{self.partition}"

    @staticmethod
    def parse(pid: str) -> Partition:
        topic, _, number = pid.rpartition(":")
        return Partition(topic, int(number))


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """What one batch read from one partition: offsets ``[first_offset, next_offset)`` of the log of the topic
    whose id is ``topic_id`` (None: not known)."""

    topic: str
    partition: int
    first_offset: int
    next_offset: int
    record_count: int
    topology_id: str
    topic_id: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.next_offset:
            msg = f"bad offset range [{self.first_offset}, {self.next_offset}) for {self.topic}:{self.partition}"
            raise ValueError(msg)
        if not 0 <= self.record_count <= self.next_offset - self.first_offset:
            msg = f"record_count {self.record_count} does not fit range of {self.topic}:{self.partition}"
            raise ValueError(msg)

    @property
    def partition_id(self) -> Partition:
        return Partition(self.topic, self.partition)

    @property
    def empty(self) -> bool:
        return self.first_offset == self.next_offset

    def empty_after(self) -> PartitionMetadata:
        """An empty range starting where this one ends (a partition that yields nothing this batch)."""
        return replace(self, first_offset=self.next_offset, record_count=0)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "first_offset": self.first_offset,
                             "next_offset": self.next_offset, "record_count": self.record_count,
                             "topology_id": self.topology_id}
        if self.topic_id is not None:  # absent, not null: the form older versions wrote and still read
            d["topic_id"] = self.topic_id
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PartitionMetadata:
        topic_id = d.get("topic_id")
        return PartitionMetadata(str(d["topic"]), int(d["partition"]), int(d["first_offset"]),
                                 int(d["next_offset"]), int(d["record_count"]), str(d["topology_id"]),
                                 None if topic_id is None else str(topic_id))


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """The ranges of one txid, by partition: what is frozen before the batch's first state write."""

    txid: int
    partitions: Mapping[Partition, PartitionMetadata]

    def __iter__(self) -> Iterator[PartitionMetadata]:
        return iter(self.partitions[p] for p in sorted(self.partitions))

    @property
    def record_count(self) -> int:
        return sum(m.record_count for m in self.partitions.values())

    def head(self, offsets: int) -> BatchPlan:
        """The same txid reading at most the first ``offsets`` offsets of each range (a sample of it)."""
        def cut(m: PartitionMetadata) -> PartitionMetadata:
            end = min(m.next_offset, m.first_offset + offsets)
            return replace(m, next_offset=end, record_count=min(m.record_count, end - m.first_offset))
        return BatchPlan(self.txid, {p: cut(m) for p, m in self.partitions.items()})

    @property
    def offset_count(self) -> int:
        return sum(m.next_offset - m.first_offset for m in self.partitions.values())

    def to_json(self) -> dict[str, Any]:
        return {"v": FORMAT_VERSION, "txid": self.txid,
                "partitions": {p.id: m.to_json() for p, m in sorted(self.partitions.items())}}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> BatchPlan:
        if d.get("v") != FORMAT_VERSION:
            msg = f"unknown batch metadata format {d.get('v')!r} (expected {FORMAT_VERSION})"
            raise ValueError(msg)
        metas = {Partition.parse(pid): PartitionMetadata.from_json(m) for pid, m in d["partitions"].items()}
        return BatchPlan(int(d["txid"]), metas)
