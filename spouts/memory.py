"""An in-memory partitioned source and its opaque/transactional spouts, for tests and the demo.

The source can make a partition unavailable, hide records beyond a per-partition visible limit
(so a replayed txid sees a different end: opacity), and truncate a partition's start (retention).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from spouts.errors import DataLossError, LogRestartedError, PartitionUnavailableError
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import DataLossPolicy, Record, SpoutKind


@dataclass
class _Log:
    records: list[Record] = field(default_factory=list)
    log_start: int = 0
    visible: int | None = None  # offsets >= visible are not readable yet (None: all)
    available: bool = True


class MemorySource:
    """Partitioned logs in memory; offsets are list indices."""

    def __init__(self, partitions: Iterable[Partition] = ()) -> None:
        self._logs: dict[Partition, _Log] = {p: _Log() for p in partitions}
        self._unlisted: set[Partition] = set()
        self._lock = threading.Lock()

    def add_partition(self, p: Partition) -> None:
        with self._lock:
            self._logs.setdefault(p, _Log())

    def partitions(self) -> list[Partition]:
        """The partitions listed now (a removed one is not, like a deleted or missing topic's)."""
        with self._lock:
            return sorted(p for p in self._logs if p not in self._unlisted)

    def set_listed(self, p: Partition, listed: bool) -> None:
        """List ``p`` or not (its records stay: a topic that is missing for a while, or no longer matched)."""
        with self._lock:
            if listed:
                self._unlisted.discard(p)
            else:
                self._unlisted.add(p)

    def recreate(self, p: Partition) -> list[Record]:
        """Delete ``p``'s log and start it again empty at offset 0 (a topic deleted and re-created); returns
        the records of the old log."""
        with self._lock:
            old, self._logs[p] = self._logs[p], _Log()
            self._unlisted.discard(p)
            return old.records

    def append(self, p: Partition, key: bytes | None, value: bytes | None) -> int:
        with self._lock:
            log = self._logs[p]
            offset = len(log.records)
            log.records.append(Record(p.topic, p.partition, offset, key, value))
            return offset

    def set_available(self, p: Partition, available: bool) -> None:
        self._logs[p].available = available

    def set_visible(self, p: Partition, limit: int | None) -> None:
        """Only offsets below ``limit`` can be read (None lifts it)."""
        self._logs[p].visible = limit

    def truncate_before(self, p: Partition, offset: int) -> None:
        """Retention: offsets below ``offset`` are gone."""
        self._logs[p].log_start = max(self._logs[p].log_start, offset)

    def all_records(self) -> list[Record]:
        with self._lock:
            return [r for p in sorted(self._logs) for r in self._logs[p].records]

    def bounds(self, p: Partition) -> tuple[int, int]:
        """``(log_start, end)`` of what can be read now; raises if unavailable."""
        log = self._logs[p]
        if not log.available:
            raise PartitionUnavailableError(p, "no leader")
        end = len(log.records) if log.visible is None else min(log.visible, len(log.records))
        return log.log_start, max(end, log.log_start)

    def log_end(self, p: Partition) -> int:
        """The offset after ``p``'s last record, visible or not (below a stored position only once re-created)."""
        return len(self._logs[p].records)

    def read(self, p: Partition, first: int, next_: int) -> list[Record]:
        log = self._logs[p]
        if not log.available:
            raise PartitionUnavailableError(p, "no leader")
        if first < log.log_start:
            raise DataLossError(p, first, log.log_start)
        return log.records[first:next_]


class _Coordinator:
    def __init__(self, source: MemorySource) -> None:
        self._source = source

    def partitions(self) -> Sequence[Partition]:
        return self._source.partitions()

    def committed(self, plan: BatchPlan) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryEmitter:
    """Plans from the last metadata (EARLIEST on first poll) and reads exact ranges."""

    def __init__(self, source: MemorySource, kind: SpoutKind, topology_id: str,
                 data_loss: DataLossPolicy = DataLossPolicy.FAIL) -> None:
        self._source, self._kind, self._topology, self._data_loss = source, kind, topology_id, data_loss
        self.lost_offsets = 0
        self.restarts = 0  # logs found restarted below a stored position

    def plan_partition(self, partition: Partition, last: PartitionMetadata | None,
                       max_records: int) -> PartitionMetadata | None:
        try:
            log_start, end = self._source.bounds(partition)
        except PartitionUnavailableError:
            if self._kind is SpoutKind.TRANSACTIONAL:
                raise
            return last.empty_after() if last else None
        start = log_start if last is None else last.next_offset
        if start > self._source.log_end(partition):  # the log restarted below the stored position (re-created)
            self.restarts += 1
            if self._data_loss is DataLossPolicy.FAIL:
                raise LogRestartedError(partition, start, log_start, self._source.log_end(partition))
            start = log_start
        if start < log_start:
            if self._data_loss is DataLossPolicy.FAIL:
                raise DataLossError(partition, start, log_start)
            self.lost_offsets += log_start - start
            start = log_start
        stop = max(start, min(start + max_records, end))
        return PartitionMetadata(partition.topic, partition.partition, start, stop, stop - start, self._topology)

    def emit_partition(self, meta: PartitionMetadata) -> list[Record]:
        return self._source.read(meta.partition_id, meta.first_offset, meta.next_offset)

    def replan_frozen(self, meta: PartitionMetadata) -> PartitionMetadata:
        try:
            log_start, _ = self._source.bounds(meta.partition_id)
        except PartitionUnavailableError:
            return meta
        if meta.empty or meta.first_offset >= log_start:
            return meta
        if self._data_loss is DataLossPolicy.FAIL:
            raise DataLossError(meta.partition_id, meta.first_offset, log_start)
        first = min(log_start, meta.next_offset)
        self.lost_offsets += first - meta.first_offset
        return PartitionMetadata(meta.topic, meta.partition, first, meta.next_offset, meta.next_offset - first,
                                 meta.topology_id)

    def close(self) -> None:
        pass


class MemorySpout:
    """A partitioned spout over a :class:`MemorySource`, opaque or transactional."""

    def __init__(self, source: MemorySource, kind: SpoutKind = SpoutKind.OPAQUE, topology_id: str = "test",
                 data_loss: DataLossPolicy = DataLossPolicy.FAIL) -> None:
        self.source, self.kind, self.topology_id, self.data_loss = source, kind, topology_id, data_loss

    def coordinator(self) -> _Coordinator:
        return _Coordinator(self.source)

    def emitter(self) -> MemoryEmitter:
        return MemoryEmitter(self.source, self.kind, self.topology_id, self.data_loss)
