"""The partitioned spout protocols, split as in Trident: a coordinator side and an emitter side.

The coordinator side answers "which partitions exist now" (discovery). The emitter side plans a
partition's next range from the last committed metadata and reads exactly a planned range. The
driver plans; executors read. Both kinds share these methods; they differ in what a plan may do:

* ``OPAQUE``: a partition that cannot be read now (no leader) gets an empty range, so a replay of
  a txid before it is frozen may carry different records.
* ``TRANSACTIONAL``: a txid's ranges are fixed when planned; an unreadable partition raises
  :class:`PartitionUnavailableError` and the batch waits and retries instead of changing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from spouts.metadata import BatchPlan, Partition, PartitionMetadata


class SpoutKind(enum.Enum):
    OPAQUE = "opaque"
    TRANSACTIONAL = "transactional"


class DataLossPolicy(enum.Enum):
    """What to do when a partition's stored next offset is below its log start (retention ran)."""

    FAIL = "fail"
    SKIP = "skip"


class PartitionUnavailableError(Exception):
    """A partition cannot be read now (no leader, broker down); the batch retries later."""

    def __init__(self, partition: Partition, reason: str = "") -> None:
        self.partition, self.reason = partition, reason
        super().__init__(f"partition {partition.id} unavailable" + (f": {reason}" if reason else ""))


class DataLossError(Exception):
    """Offsets the pipeline has not read are gone from the log (policy ``fail``)."""

    def __init__(self, partition: Partition, next_offset: int, log_start: int) -> None:
        self.partition, self.next_offset, self.log_start = partition, next_offset, log_start
        super().__init__(
            f"data loss on {partition.id}: next offset to read is {next_offset} but the log starts at "
            f"{log_start} ({log_start - next_offset} offsets gone); set data_loss: skip to continue from the log start"
        )


@dataclass(frozen=True, slots=True)
class Record:
    """One source record, with everything transforms may read."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0  # milliseconds since the epoch
    headers: tuple[tuple[str, bytes | None], ...] = field(default=())


@runtime_checkable
class PartitionedCoordinator(Protocol):
    """Driver side: the partitions that exist now (called once per batch; may cache discovery)."""

    def partitions(self) -> Sequence[Partition]: ...

    def committed(self, plan: BatchPlan) -> None:
        """Called after ``plan``'s txid committed (e.g. to publish offsets for monitoring)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PartitionedEmitter(Protocol):
    """Plans and reads one partition's batches."""

    def plan_partition(self, partition: Partition, last: PartitionMetadata | None,
                       max_records: int) -> PartitionMetadata | None:
        """The next range after ``last`` (None: first poll), at most ``max_records`` offsets long.

        Returns None to leave a never-read partition out of this batch. Opaque emitters return
        ``last.empty_after()`` for an unreadable partition; transactional ones raise.
        """
        ...

    def emit_partition(self, meta: PartitionMetadata) -> Iterable[Record]:
        """Exactly the records of ``meta``'s range; raises PartitionUnavailableError if it can't."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PartitionedSpout(Protocol):
    """A spout: its kind, and factories for its two sides."""

    kind: SpoutKind

    def coordinator(self) -> PartitionedCoordinator: ...

    def emitter(self) -> PartitionedEmitter: ...
