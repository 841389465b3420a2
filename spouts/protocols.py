"""The partitioned spout protocols, split as in Trident: a coordinator side and an emitter side.

The coordinator side answers "which partitions exist now" (discovery). The emitter side plans a
partition's next range from the last committed metadata and reads exactly a planned range. The
driver plans; executors read. Both kinds share these methods; they differ in what a plan may do:

* ``OPAQUE``: a partition that cannot be read now (no leader) gets an empty range, so a replay of
  a txid before it is frozen may carry different records.
* ``TRANSACTIONAL``: a txid's ranges are fixed when planned; an unreadable partition raises
  :class:`~spouts.errors.PartitionUnavailableError` and the batch waits and retries instead of changing.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from spouts.bad_records import OnBad
from spouts.metadata import BatchPlan, Partition, PartitionMetadata

if TYPE_CHECKING:  # pyarrow is heavy and only the Spark path needs it
    import pyarrow as pa

#: Rows per Arrow record batch when a reader is not told otherwise.
DEFAULT_ARROW_BATCH_SIZE = 65_536
#: The fields that name a record in an :class:`ArrowSpout`'s batches (and a bad record by them): read whatever
#: ``columns`` a reader asks for.
COORDINATES = ("topic", "partition", "offset")


class SpoutKind(enum.Enum):
    OPAQUE = "opaque"
    TRANSACTIONAL = "transactional"


class DataLossPolicy(enum.Enum):
    """What to do when a partition's stored position is gone: below its log start (retention ran), or in a log that
    restarted (a topic re-created, a log truncated)."""

    FAIL = "fail"
    SKIP = "skip"


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

    def replan_frozen(self, meta: PartitionMetadata) -> PartitionMetadata:
        """A frozen range about to be replayed, checked against retention.

        ``meta`` itself while its first offset is still in the log (or the partition can't be asked
        now: the read then waits). Offsets gone: policy ``fail`` raises DataLossError; ``skip``
        returns what is left of the range (counted in the data-loss metrics, logged).
        """
        ...

    def close(self) -> None: ...


@runtime_checkable
class ReportsDataLoss(Protocol):
    """An emitter that says what it skipped under data-loss policy ``skip`` (the last event, with when), or None."""

    last_data_loss: str | None


@runtime_checkable
class DescribesRead(Protocol):
    """A spout that says, for people, how its read tasks read a range of ``columns`` (a pipeline's start-up line)."""

    def describe_read(self, columns: Sequence[str] | None = None) -> str: ...


@runtime_checkable
class PlansInBulk(Protocol):
    """An emitter that fetches what a whole plan needs at once (Kafka: the watermarks, one request per broker)."""

    def planning(self, partitions: Sequence[Partition]) -> AbstractContextManager[None]:
        """A plan of ``partitions`` runs inside the block: its ``plan_partition`` calls may use what was
        fetched on entry; nothing fetched outlives the block."""
        ...


@runtime_checkable
class PartitionedSpout(Protocol):
    """A spout: its kind, and factories for its two sides."""

    kind: SpoutKind

    def coordinator(self) -> PartitionedCoordinator: ...

    def emitter(self) -> PartitionedEmitter: ...


@runtime_checkable
class ArrowSpout(PartitionedSpout, Protocol):
    """A spout Spark can read: executors fetch a planned range as Arrow record batches.

    The spout itself is shipped to executors, so it must pickle as plain data and open its
    clients inside ``read_arrow``.
    """

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of every batch ``read_arrow`` yields."""
        ...

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = DEFAULT_ARROW_BATCH_SIZE,
                   on_bad: OnBad | None = None, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Exactly ``meta``'s records, in offset order, in batches of at most ``batch_size`` rows.

        A record that cannot be decoded is left out and reported to ``on_bad``; without ``on_bad``
        it raises :class:`~spouts.bad_records.BadRecordError`. ``columns``: only these fields of
        :attr:`arrow_schema`, in its order (None: all); a record is bad or good whatever the columns.
        """
        ...
