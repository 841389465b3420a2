"""JSON objects with declared fields and types, parsed by Arrow's JSON reader into a struct column.

The values of a batch are joined into one newline-delimited document and parsed at once with an
explicit schema (no Python object per record). Fields not declared are ignored; a declared field
that is absent or null is null. When the batch does not parse into exactly one row per value, it
is split in halves until each bad value stands alone (a few parses per bad record); the bad ones
are reported, the rest parsed again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from spouts.kafka.formats.spec import Decoded, Failure, field_type

_MIN_BLOCK = 1 << 20


@dataclass(frozen=True, slots=True)
class JsonDecoder:
    """Decodes JSON objects into ``struct<declared fields>``; a null value stays null."""

    fields: tuple[tuple[str, str], ...]

    @property
    def arrow_type(self) -> pa.StructType:
        return pa.struct([(n, field_type(t)) for n, t in self.fields])

    def decode(self, values: pa.Array) -> Decoded:
        return JsonObjects(self.arrow_type).decode(values)


@dataclass(frozen=True, slots=True)
class JsonObjects:
    """JSON objects read into ``arrow_type`` (a struct) by Arrow's JSON reader."""

    arrow_type: pa.StructType

    def decode(self, values: pa.Array) -> Decoded:
        present = pc.is_valid(values)
        dense = values.filter(present)
        parsed = self._parse(dense)
        bad: dict[int, Failure] = {}
        if parsed is None:
            positions = pc.indices_nonzero(present).to_pylist()
            for j in self._bad(dense, 0, len(dense)):
                bad[positions[j]] = self._why(dense[j].as_py())
            keep = pc.and_(present, pa.array([i not in bad for i in range(len(values))]))
            dense = values.filter(keep)
            parsed = self._parse(dense)
            if parsed is None:  # cannot happen: each value alone parsed
                raise RuntimeError("JSON values that parse one by one do not parse together")
            present = keep
        return Decoded(scatter(parsed, present), bad)

    def _parse(self, dense: pa.Array) -> pa.StructArray | None:
        """The values (no nulls) as one struct row each, or None when they do not parse so."""
        n = len(dense)
        if n == 0:
            return pa.array([], self.arrow_type)
        joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), dense), b"\n")[0]
        longest = pc.max(pc.binary_length(dense)).as_py() or 0
        options = pj.ParseOptions(explicit_schema=self._read_schema(), unexpected_field_behavior="ignore",
                                  newlines_in_values=bool(pc.any(pc.match_substring(dense, "\n")).as_py()))
        try:
            table = pj.read_json(pa.BufferReader(joined.as_buffer()), parse_options=options,
                                 read_options=pj.ReadOptions(block_size=max(_MIN_BLOCK, 2 * longest + 2)))
            table.validate(full=True)  # the reader does not check that strings are UTF-8: a value that is not is bad
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        if table.num_rows != n:  # a value that is not one object (two, or none)
            return None
        table = table.select([f.name for f in self.arrow_type]).combine_chunks()
        try:  # the types Arrow's JSON reader reads as text (dates) become their declared type
            return pa.StructArray.from_arrays(
                [(table.column(i).chunk(0) if table.column(i).num_chunks else pa.array([], table.schema.field(i).type))
                 .cast(f.type) for i, f in enumerate(self.arrow_type)], fields=list(self.arrow_type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def _read_schema(self) -> pa.Schema:
        """What the JSON reader is asked for: the declared types, dates as text (it reads no date)."""
        return pa.schema([f.with_type(pa.string()) if pa.types.is_date(f.type) else f for f in self.arrow_type])

    def _bad(self, dense: pa.Array, lo: int, hi: int) -> list[int]:
        """Indices in ``[lo, hi)`` of the values that do not parse, by halving."""
        if self._parse(dense.slice(lo, hi - lo)) is not None:
            return []
        if hi - lo == 1:
            return [lo]
        mid = (lo + hi) // 2
        return self._bad(dense, lo, mid) + self._bad(dense, mid, hi)

    def _why(self, value: bytes) -> Failure:
        try:
            doc = json.loads(value)
        except (ValueError, UnicodeDecodeError) as e:
            return Failure("json_invalid", f"not JSON: {e}")
        if not isinstance(doc, dict):
            return Failure("json_not_object", f"a JSON {type(doc).__name__}, not an object")
        try:
            pj.read_json(pa.BufferReader(value.replace(b"\n", b" ")),
                         parse_options=pj.ParseOptions(explicit_schema=self._read_schema(),
                                                       unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            return Failure("json_type", f"a field does not fit its declared type: {e}")
        if self._parse(pa.array([value], pa.binary())) is None:
            return Failure("json_type", "a field does not convert to its declared type (e.g. not a date)")
        return Failure("json_invalid", "not one JSON object")


def scatter(dense: pa.Array, present: pa.Array) -> pa.Array:
    """``dense`` (one row per true in ``present``) spread to ``present``'s length, null where it is false."""
    if len(dense) == len(present):
        return dense
    positions = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), 1)
    return pc.take(dense, pc.if_else(present, positions, pa.scalar(None, pa.int64())))
