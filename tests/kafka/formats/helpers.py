"""Raw batches as the Kafka read path yields them, and a collector of bad records."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from spouts.bad_records import BadRecord
from spouts.kafka.arrow import SCHEMA


def raw_batch(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None, *, topic: str = "t",
              partition: int = 2, first_offset: int = 100) -> pa.RecordBatch:
    """A raw batch of ``values`` (and ``keys``) at consecutive offsets from ``first_offset``."""
    n = len(values)
    return pa.RecordBatch.from_arrays([
        pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
        pa.array(range(first_offset, first_offset + n), pa.int64()),
        pa.array([1_700_000_000_000 + i for i in range(n)], SCHEMA.field("timestamp").type),
        pa.array(keys if keys is not None else [None] * n, pa.binary()), pa.array(values, pa.binary()),
        pa.array([[] for _ in range(n)], SCHEMA.field("headers").type),
    ], schema=SCHEMA)


class Collected(list[BadRecord]):
    """An ``on_bad`` that keeps what it is told."""

    def __call__(self, record: BadRecord) -> None:
        self.append(record)

    def by_offset(self) -> dict[int, str]:
        return {r.offset: r.reason for r in self}
