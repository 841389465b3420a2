"""Faults planted in the pipeline's own path for the audit to find: picklable, so Spark's Python workers run them.

Each is the kind of bug the audit exists for: the pipeline's reader dropping or repeating one record,
its commit combining a key's partial into the stored value twice, its column pruning leaving out a
column the sink needs. They stay planted while the audit runs, as a bug in the code would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spouts.bad_records import OnBad
from spouts.kafka.arrow import DEFAULT_BATCH_SIZE
from spouts.kafka.spout import KafkaSpout
from spouts.metadata import PartitionMetadata
from states.aggregators import Count


class MisreadingSpout(KafkaSpout):
    """A Kafka spout whose range reads drop (``copies`` 0) or repeat (``copies`` 2) the record at ``offset`` of
    ``partition``; found by its place in the range (a pruned read may carry no offsets)."""

    partition: int = 0
    offset: int = 0
    copies: int = 0

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = DEFAULT_BATCH_SIZE,
                   on_bad: OnBad | None = None, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        seen = 0
        for b in super().read_arrow(meta, batch_size, on_bad, columns):
            row, seen = self.offset - meta.first_offset - seen, seen + b.num_rows
            if meta.partition == self.partition and 0 <= row < b.num_rows:
                take = [i for i in range(b.num_rows) for _ in range(self.copies if i == row else 1)]
                b = b.take(pa.array(take, pa.int64()))  # noqa: PLW2901  the planted fault
            yield b

    def __getstate__(self) -> dict[str, object]:
        return {**super().__getstate__(), "partition": self.partition, "offset": self.offset, "copies": self.copies}


def misreading(spout: Any, partition: int, offset: int, copies: int) -> MisreadingSpout:
    """``spout`` (a KafkaSpout) as a :class:`MisreadingSpout` of the record at ``partition``, ``offset``."""
    s = MisreadingSpout(spout.config, spout.topology_id, spout.metrics)
    s.partition, s.offset, s.copies = partition, offset, copies
    return s


@dataclass(frozen=True, slots=True)
class TwiceCount(Count):
    """Count whose combine adds a batch's partial to the stored value twice (a commit applying it twice)."""

    def combine(self, a: int, b: int) -> int:
        return a + 2 * b
