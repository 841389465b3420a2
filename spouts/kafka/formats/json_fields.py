"""JSON objects with declared fields and types, parsed by Arrow's JSON reader into a struct column.

The values of a batch are joined into one newline-delimited document and parsed at once with an
explicit schema (no Python object per record). Fields not declared are ignored; a declared field
that is absent or null is null. When the batch does not parse into exactly one row per value, the
bad values are isolated: those not shaped as one object are tried alone, the rest split in halves
until each bad value stands alone (a few parses per bad record); Arrow's reader has the last word
on every value, so a value is good or bad whatever batch it is in. The bad ones
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
_THREADED = 4 << 20  # a smaller document is parsed on the calling thread (a thread pool costs more than it saves)
_OBJECT_SHAPE = r"^\s*\{[\s\S]*\}\s*$"  # what one JSON object looks like from its ends


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
        # a blank value (no object) beside one holding two would balance the count of rows parsed: never parsed
        # with others (a value starting with "{" is not blank)
        blank = not pc.all(pc.starts_with(dense, pattern="{")).as_py() and \
            pc.any(pc.match_substring_regex(dense, r"^\s*$")).as_py()
        parsed = None if blank else self._parse(dense)
        bad: dict[int, Failure] = {}
        if parsed is None:
            positions = pc.indices_nonzero(present).to_pylist()
            found, good = self._find_bad(dense)
            for j, failure in found.items():
                bad[positions[j]] = failure
            keep = pc.and_(present, pa.array([i not in bad for i in range(len(values))]))
            parsed = good if good is not None else self._parse(values.filter(keep))
            if parsed is None:  # cannot happen: each value alone parsed
                raise RuntimeError("JSON values that parse one by one do not parse together")
            present = keep
        return Decoded(scatter(parsed, present), bad)

    def _parse(self, dense: pa.Array) -> pa.StructArray | None:
        """The values (no nulls) as one struct row each, or None when they do not parse so."""
        return self._try(dense)[0]

    def _try(self, dense: pa.Array) -> tuple[pa.StructArray | None, str]:
        """:meth:`_parse`, with the reader's error when there is one."""
        n = len(dense)
        if n == 0:
            return pa.array([], self.arrow_type), ""
        if n == 1:  # one value alone (a suspect tried by itself): no join
            value: bytes = dense[0].as_py()
            document, longest, newlines = value, len(value), b"\n" in value
        else:
            joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), dense), b"\n")[0]
            document, longest = joined.as_buffer(), pc.max(pc.binary_length(dense)).as_py() or 0
            newlines = bool(pc.any(pc.match_substring(dense, "\n")).as_py())
        options = pj.ParseOptions(explicit_schema=self._read_schema(), unexpected_field_behavior="ignore",
                                  newlines_in_values=newlines)
        size = len(document)
        read = pj.ReadOptions(block_size=max(min(_MIN_BLOCK, size + 1), 2 * longest + 2), use_threads=size > _THREADED)
        try:
            table = pj.read_json(pa.BufferReader(document), parse_options=options, read_options=read)
            table.validate(full=True)  # the reader does not check that strings are UTF-8: a value that is not is bad
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            return None, str(e)
        if table.num_rows != n:  # a value that is not one object (two, or none)
            return None, f"{table.num_rows} JSON objects in {n} values"
        table = table.select([f.name for f in self.arrow_type]).combine_chunks()
        try:  # the types Arrow's JSON reader reads as text (dates) become their declared type
            return pa.StructArray.from_arrays(
                [(table.column(i).chunk(0) if table.column(i).num_chunks else pa.array([], table.schema.field(i).type))
                 .cast(f.type) for i, f in enumerate(self.arrow_type)], fields=list(self.arrow_type)), ""
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return None, str(e)

    def _read_schema(self) -> pa.Schema:
        """What the JSON reader is asked for: the declared types, dates as text (it reads no date)."""
        return pa.schema([f.with_type(pa.string()) if pa.types.is_date(f.type) else f for f in self.arrow_type])

    def _find_bad(self, dense: pa.Array) -> tuple[dict[int, Failure], pa.StructArray | None]:
        """The values Arrow's reader refuses, and why; and the other values parsed, when they parsed at once.

        Values not shaped as one object (``{`` to ``}``, told without a Python object per value) are tried
        alone (most likely bad: a batch of garbage is not halved); the rest are halved until each bad one
        stands alone. One reader call settles each bad value; its reason is Python's parser's when that
        finds no JSON object in it, else the reader's."""
        found: dict[int, Failure] = {}
        suspects = pc.indices_nonzero(pc.invert(pc.match_substring_regex(dense, _OBJECT_SHAPE))).to_pylist()
        for j in suspects:
            parsed, error = self._try(dense.slice(j, 1))
            if parsed is None:
                found[j] = _reason(dense[j].as_py(), error)
        tried = set(suspects)
        rest = [j for j in range(len(dense)) if j not in tried] if tried else None
        others = dense if rest is None else dense.take(pa.array(rest, pa.int64()))
        good, error = self._try(others)
        if good is None:
            for k, why in self._bad(others, 0, len(others), error):
                j = k if rest is None else rest[k]
                found[j] = _reason(dense[j].as_py(), why)
        # the good values are the others exactly when every suspect was bad
        return dict(sorted(found.items())), good if len(found) == len(suspects) else None

    def _bad(self, dense: pa.Array, lo: int, hi: int, error: str | None) -> list[tuple[int, str]]:
        """The values in ``[lo, hi)`` that do not parse, with the reader's error, by halving
        (``error``: the range is known not to parse, for this reason)."""
        if error is None:
            parsed, error = self._try(dense.slice(lo, hi - lo))
            if parsed is not None:
                return []
        if hi - lo == 1:
            return [(lo, error)]
        mid = (lo + hi) // 2
        return self._bad(dense, lo, mid, None) + self._bad(dense, mid, hi, None)


def _reason(value: bytes, error: str) -> Failure:
    """Why ``value``, which Arrow's reader refused alone with ``error``, is bad."""
    return _not_an_object(value) or (
        Failure("json_invalid", f"not one JSON object: {error}") if "JSON objects in" in error
        else Failure("json_type", f"a field does not fit its declared type: {error}"))


def _not_an_object(value: bytes) -> Failure | None:
    """Why Python's parser finds no JSON object in ``value`` (None: it finds one)."""
    try:
        doc = json.loads(value)
    except (ValueError, UnicodeDecodeError) as e:
        return Failure("json_invalid", f"not JSON: {e}")
    if not isinstance(doc, dict):
        return Failure("json_not_object", f"a JSON {type(doc).__name__}, not an object")
    return None


def scatter(dense: pa.Array, present: pa.Array) -> pa.Array:
    """``dense`` (one row per true in ``present``) spread to ``present``'s length, null where it is false."""
    if len(dense) == len(present):
        return dense
    positions = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), 1)
    return pc.take(dense, pc.if_else(present, positions, pa.scalar(None, pa.int64())))
