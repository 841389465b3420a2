"""Decoding a raw Kafka batch (:data:`spouts.kafka.arrow.SCHEMA`) into typed ``key``/``value`` columns.

The decoded schema is the raw one with ``key`` and ``value`` replaced by their decoded types
(``binary``, ``string``, or a struct of the format's fields); ``topic``, ``partition``, ``offset``,
``timestamp`` and ``headers`` stay as they are. A null key or value (a tombstone) stays null and
is never bad. A record whose key or value does not decode is left out and reported, in offset order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from spouts.bad_records import BadRecord, BadRecordError, OnBad, Stage
from spouts.kafka.formats.plain import BytesDecoder
from spouts.kafka.formats.spec import Decoded, Failure
from spouts.protocols import COORDINATES


class ColumnDecoder(Protocol):
    """Decodes one binary column (keys or values) into its Arrow type; picklable plain data."""

    @property
    def arrow_type(self) -> pa.DataType: ...

    def decode(self, values: pa.Array) -> Decoded: ...


def decoded_schema(raw: pa.Schema, key: ColumnDecoder, value: ColumnDecoder) -> pa.Schema:
    """``raw`` with ``key`` and ``value`` typed as the decoders make them."""
    out = raw.set(raw.get_field_index("key"), pa.field("key", key.arrow_type))
    return out.set(out.get_field_index("value"), pa.field("value", value.arrow_type))


@dataclass(frozen=True, slots=True)
class BatchDecoder:
    """Decodes raw batches; the bad records of each go to ``on_bad`` (or raise without it)."""

    key: ColumnDecoder
    value: ColumnDecoder
    schema: pa.Schema  # decoded_schema(raw, key, value)

    def raw_columns(self, columns: Sequence[str] | None) -> list[str] | None:
        """The raw columns to read for decoded ``columns`` (None: all): those, the key and value whose decoding
        may fail (a record is bad or good whatever is asked of it) and the coordinates that name a bad one."""
        if columns is None:
            return None
        needed = {*columns, *COORDINATES}
        needed |= {part for part, d in (("key", self.key), ("value", self.value)) if not isinstance(d, BytesDecoder)}
        return [n for n in self.schema.names if n in needed]

    def decode(self, raw: pa.RecordBatch, on_bad: OnBad | None, columns: Sequence[str] | None = None) -> pa.RecordBatch:
        """``raw`` (some or all raw columns, :meth:`raw_columns`) decoded, with ``columns`` only (None: all), and
        without its bad records."""
        decoded = {part: d.decode(raw.column(part)) for part, d in (("key", self.key), ("value", self.value))
                   if part in raw.schema.names}
        schema = self.schema if columns is None else pa.schema([f for f in self.schema if f.name in columns])
        arrays = [decoded[f.name].array if f.name in decoded else raw.column(f.name) for f in schema]
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        keys, values = (decoded[p].bad if p in decoded else {} for p in ("key", "value"))
        if not keys and not values:
            return batch
        bad = sorted(set(keys) | set(values))
        self._report(raw, bad, keys, values, on_bad)
        keep = [True] * raw.num_rows
        for i in bad:
            keep[i] = False
        return batch.filter(pa.array(keep))

    @staticmethod
    def _report(raw: pa.RecordBatch, bad: Sequence[int], keys: dict[int, Failure], values: dict[int, Failure],
                on_bad: OnBad | None) -> None:
        offsets = pc.take(raw.column("offset"), pa.array(bad, pa.int64())).to_pylist()
        topic, partition = raw.column("topic")[0].as_py(), raw.column("partition")[0].as_py()
        for i, offset in zip(bad, offsets, strict=True):
            part, failure = ("key", keys[i]) if i in keys else ("value", values[i])
            record = BadRecord(topic, partition, offset, Stage.DECODE, failure.reason, f"{part}: {failure.message}")
            if on_bad is None:
                raise BadRecordError(record)
            on_bad(record)
