"""JSON objects with declared fields and types, parsed by Arrow's JSON reader into a struct column.

The values of a batch are joined into one newline-delimited document and parsed at once with an
explicit schema (no Python object per record). Fields not declared are ignored; a declared field
that is absent or null is null. A leading UTF-8 byte-order mark is dropped from each value, as
Python's ``json.loads`` does. A value that does not run from ``{`` to ``}`` (JSON whitespace aside)
is bad without reaching the reader: ``null`` and the other top-level scalars and arrays, blank
values. The traps this avoids: Arrow's reader crashes the process (a segmentation fault) on a
document or block that starts with ``null``, reads a ``null`` beside objects as a row of nulls, and
takes a mark that is not first in the document for garbage.

When the batch does not parse into exactly one row per value, the bad values are isolated by
halving until each stands alone (a few parses per bad record); were the good values to refuse to
parse together again, each would be taken as it parses alone. So a value is good or bad whatever
batch it is in, and the same batch is always judged the same way (a replay decides as the first try).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from spouts.kafka.formats.spec import Decoded, Failure, field_type

_BOM = "\ufeff"  # the UTF-8 byte-order mark (EF BB BF), as a pattern Arrow matches against binary values
_SHAPED = r"^[ \t\n\r]*\{[\s\S]*\}[ \t\n\r]*$"  # one JSON object from its ends (JSON's own whitespace)
_MAX_BLOCK = (1 << 31) - 1
_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number",
          bool: "a boolean", type(None): "null"}


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
class _Refused:
    """Why the reader did not read a run of values as one row each: its error, or another row count."""

    message: str
    rows_differ: bool


@dataclass(frozen=True, slots=True)
class JsonObjects:
    """JSON objects read into ``arrow_type`` (a struct) by Arrow's JSON reader."""

    arrow_type: pa.StructType

    def decode(self, values: pa.Array) -> Decoded:
        present = pc.is_valid(values)
        dense = without_bom(values.filter(present))
        bad: dict[int, Failure] = {}  # by position in dense
        shaped = _shaped(dense)
        readable, where = dense, None
        if shaped is not None:  # some values are no object: bad as they are, never read by Arrow
            bad = {j: _unshaped(dense[j].as_py()) for j in pc.indices_nonzero(pc.invert(shaped)).to_pylist()}
            readable, where = dense.filter(shaped), pc.indices_nonzero(shaped).to_pylist()
        parsed, refused = self._try(readable)
        if parsed is None:
            found, parsed = self._find_bad(readable, refused)
            bad.update({(j if where is None else where[j]): failure for j, failure in found.items()})
        if not bad:
            return Decoded(scatter(parsed, present), {})
        positions = pc.indices_nonzero(present).to_pylist()
        out = {positions[j]: bad[j] for j in sorted(bad)}
        keep = pc.and_(present, pa.array([i not in out for i in range(len(values))]))
        return Decoded(scatter(parsed, keep), out)

    def _try(self, dense: pa.Array) -> tuple[pa.StructArray | None, _Refused | None]:
        """The values (no nulls, each shaped as one object) as one struct row each, or why not.

        One block for the whole document: every value starts with ``{``, so no block starts with a
        ``null`` row (the reader's crash), whatever the values hold after their first object."""
        n = len(dense)
        if n == 0:
            return pa.array([], self.arrow_type), None
        if n == 1:  # one value alone (a suspect tried by itself): no join
            document: Any = dense[0].as_py()
        else:
            document = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), dense), b"\n")[0].as_buffer()
        options = pj.ParseOptions(explicit_schema=self._read_schema(), unexpected_field_behavior="ignore")
        read = pj.ReadOptions(block_size=min(len(document) + 1, _MAX_BLOCK), use_threads=False)
        try:
            table = pj.read_json(pa.BufferReader(document), parse_options=options, read_options=read)
            table.validate(full=True)  # the reader does not check that strings are UTF-8: a value that is not is bad
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            return None, _Refused(str(e), rows_differ=False)
        if table.num_rows != n:  # a value holding several objects
            return None, _Refused(f"{table.num_rows} JSON values in {n}", rows_differ=True)
        table = table.select([f.name for f in self.arrow_type]).combine_chunks()
        try:  # the types Arrow's JSON reader reads as text (dates) become their declared type
            return pa.StructArray.from_arrays(
                [(table.column(i).chunk(0) if table.column(i).num_chunks else pa.array([], table.schema.field(i).type))
                 .cast(f.type) for i, f in enumerate(self.arrow_type)], fields=list(self.arrow_type)), None
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return None, _Refused(str(e), rows_differ=False)

    @property
    def _names(self) -> frozenset[str]:
        return frozenset(f.name for f in self.arrow_type)

    def _read_schema(self) -> pa.Schema:
        """What the JSON reader is asked for: the declared types, dates as text (it reads no date)."""
        return pa.schema([f.with_type(pa.string()) if pa.types.is_date(f.type) else f for f in self.arrow_type])

    def _find_bad(self, dense: pa.Array, refused: _Refused | None) -> tuple[dict[int, Failure], pa.StructArray]:
        """The values Arrow's reader refuses alone, and why; and the others parsed, one row each.

        Halving finds each bad value alone (one reader call settles it). Should the others still not
        parse together, each is read alone: the outcome is the values' own, the same on every replay."""
        names = self._names
        found = {j: _reason(dense[j].as_py(), why, names) for j, why in self._bad(dense, 0, len(dense), refused)}
        good = self._try(dense.filter(pa.array([j not in found for j in range(len(dense))])))[0]
        return (found, good) if good is not None else self._one_by_one(dense, found)

    def _one_by_one(self, dense: pa.Array, found: dict[int, Failure]) -> tuple[dict[int, Failure], pa.StructArray]:
        """Each value not yet found bad read alone: what it gives alone is its outcome in any batch."""
        found, rows = dict(found), []
        for j in range(len(dense)):
            if j in found:
                continue
            parsed, why = self._try(dense.slice(j, 1))
            if parsed is None:
                found[j] = _reason(dense[j].as_py(), why, self._names)
            else:
                rows.append(parsed)
        good = pa.concat_arrays(rows) if rows else pa.array([], self.arrow_type)
        return dict(sorted(found.items())), good

    def _bad(self, dense: pa.Array, lo: int, hi: int, refused: _Refused | None) -> list[tuple[int, _Refused | None]]:
        """The values in ``[lo, hi)`` that do not parse, with the reader's refusal, by halving
        (``refused`` given: the range is known not to parse, for this reason)."""
        if refused is None:
            parsed, refused = self._try(dense.slice(lo, hi - lo))
            if parsed is not None:
                return []
        if hi - lo == 1:
            return [(lo, refused)]
        mid = (lo + hi) // 2
        return self._bad(dense, lo, mid, None) + self._bad(dense, mid, hi, None)


def without_bom(dense: pa.Array) -> pa.Array:
    """``dense`` (a binary array without nulls) with one leading UTF-8 byte-order mark dropped from each value."""
    marked = pc.starts_with(dense, pattern=_BOM)
    if not pc.any(marked).as_py():
        return dense
    return pc.if_else(marked, pc.binary_slice(dense, 3, _MAX_BLOCK), dense)


def _shaped(dense: pa.Array) -> pa.Array | None:
    """Which values run from ``{`` to ``}`` (JSON whitespace aside); None when all do. Two prefix and suffix
    compares over the batch; the regular expression only for the values they leave in doubt."""
    if not len(dense):
        return None
    plain = pc.and_(pc.starts_with(dense, pattern="{"), pc.ends_with(dense, pattern="}"))
    if pc.all(plain).as_py():
        return None
    doubt = pc.indices_nonzero(pc.invert(plain))
    verdict = pc.match_substring_regex(dense.take(doubt), _SHAPED).to_pylist()
    shaped = plain.to_pylist()
    for j, ok in zip(doubt.to_pylist(), verdict, strict=True):
        shaped[j] = ok
    return pa.array(shaped, pa.bool_())


def _reason(value: bytes, refused: _Refused | None, declared: frozenset[str]) -> Failure:
    """Why ``value`` (shaped as one object), which Arrow's reader refused alone, is bad."""
    why = refused.message if refused is not None else "refused"
    return _not_an_object(value, declared) or (
        Failure("json_invalid", f"not one JSON object: {why}") if refused is not None and refused.rows_differ
        else Failure("json_type", f"a field does not fit its declared type: {why}"))


def _unshaped(value: bytes) -> Failure:
    """Why ``value``, which does not run from ``{`` to ``}``, is bad."""
    return _not_an_object(value, frozenset()) or Failure("json_invalid", "not one JSON object in UTF-8 from { to }")


def _not_an_object(value: bytes, declared: frozenset[str]) -> Failure | None:
    """Why Python's parser finds no JSON object in ``value`` (None: it finds one), or one that names a
    ``declared`` key twice (Arrow's reader refuses that; a key not declared may appear twice)."""
    try:
        doc = json.loads(value, object_pairs_hook=_Object)
    except (ValueError, UnicodeDecodeError) as e:
        return Failure("json_invalid", f"not JSON: {e}")
    except RecursionError:
        return Failure("json_invalid", "not JSON that can be read: nested too deeply")
    if not isinstance(doc, dict):
        return Failure("json_not_object", f"{_KINDS.get(type(doc), 'a value')} at the top level, not a JSON object")
    if isinstance(doc, _Object) and (twice := sorted(doc.twice & declared)):
        return Failure("json_invalid", f"the object names the key {twice[0]!r} twice")
    return None


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers the keys it named more than once."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.twice: set[str] = set()
        if len(self) < len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                (self.twice if k in seen else seen).add(k)


def scatter(dense: pa.Array, present: pa.Array) -> pa.Array:
    """``dense`` (one row per true in ``present``) spread to ``present``'s length, null where it is false."""
    if len(dense) == len(present):
        return dense
    positions = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), 1)
    return pc.take(dense, pc.if_else(present, positions, pa.scalar(None, pa.int64())))
