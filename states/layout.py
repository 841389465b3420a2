"""How a :class:`~states.spec.MapSpec` lays stored values out in typed columns.

Shared by the durable backends (this module imports no driver). A stored value becomes a row:

* opaque:            ``txid, <v1>, <v2>, ..., prev_<v1>, prev_<v2>, ...``
* transactional:     ``txid, <v1>, <v2>, ...``
* non-transactional: ``<v1>, <v2>, ...``

Keys become the key columns, in order. A value with one value column is a scalar, otherwise a
tuple. A stamped value column (``latest``/``first``, :mod:`states.stamped`) is two columns,
``<v>`` and ``<v>_at`` (and ``prev_<v>``, ``prev_<v>_at``), and reads back as a ``Stamped``. Traps: a tuple value whose fields are all None reads back as None (there is no column to
tell them apart), and so does a non-transactional value of None (the row reads as absent).
Compare-and-set compares *encoded rows*, never Python values, so these collapses are harmless.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from datetime import UTC, datetime
from typing import Any

from states.spec import MapSpec, StateKind
from states.stamped import AT_SUFFIX, Stamped
from states.values import OpaqueValue, TransactionalValue

Row = tuple[Any, ...]
Convert = Callable[[Any], Any]


def _cql_timestamp(v: datetime) -> datetime:
    """A datetime as Cassandra stores it: naive UTC, millisecond precision."""
    if v.tzinfo is not None:
        v = v.astimezone(UTC).replace(tzinfo=None)
    return v.replace(microsecond=v.microsecond // 1000 * 1000)


# Python value -> what the driver binds, by column type (both directions are the same for CQL).
CQL_ENCODE: Mapping[str, Convert] = {
    "text": str, "bigint": int, "int": int, "double": float, "boolean": bool, "blob": bytes,
    "timestamp": _cql_timestamp,
}
CQL_DECODE: Mapping[str, Convert] = CQL_ENCODE  # the driver returns these types already


class RowLayout:
    """Encodes keys and stored values of one spec into column tuples, and back.

    ``encode``/``decode`` convert one non-null column value by its type (a backend's types).
    """

    def __init__(self, spec: MapSpec, encode: Mapping[str, Convert] = CQL_ENCODE,
                 decode: Mapping[str, Convert] = CQL_DECODE) -> None:
        self.spec, self._enc, self._dec = spec, encode, decode
        values = [p for c in spec.value
                  for p in ([(c.name, c.type), (c.name + AT_SUFFIX, "text")] if c.stamped else [(c.name, c.type)])]
        self._width = len(values)
        if spec.kind is StateKind.OPAQUE:
            stored = [("txid", "bigint"), *values, *((f"prev_{n}", t) for n, t in values)]
        elif spec.kind is StateKind.TRANSACTIONAL:
            stored = [("txid", "bigint"), *values]
        else:
            stored = values
        self.key_columns: tuple[tuple[str, str], ...] = tuple((c.name, c.type) for c in spec.key)
        self.stored_columns: tuple[tuple[str, str], ...] = tuple(stored)
        self.columns = self.key_columns + self.stored_columns
        # each column's converter looked up once: a commit encodes two rows and a key per key written
        self._key_enc = tuple(encode[t] for _, t in self.key_columns)
        self._stored_enc = tuple(encode[t] for _, t in self.stored_columns)
        self._stored_dec = tuple(decode[t] for _, t in self.stored_columns)
        self._plain = spec.scalar and not spec.value[0].stamped  # a value is its one column, as it is

    # keys
    def key_row(self, key: Hashable) -> Row:
        if not isinstance(key, tuple):
            if len(self.key_columns) != 1:
                msg = f"table {self.spec.table}: key {key!r} must be a tuple of {len(self.key_columns)}"
                raise TypeError(msg)
            key = (key,)
        if len(key) != len(self.key_columns):
            msg = f"table {self.spec.table}: key {key!r} must have {len(self.key_columns)} fields"
            raise TypeError(msg)
        return tuple([None if v is None else f(v) for f, v in zip(self._key_enc, key, strict=True)])

    # stored values
    def value_row(self, value: Any) -> Row | None:
        """The stored columns of ``value`` (None for None: the row is absent)."""
        if value is None:
            return None
        kind = self.spec.kind
        if kind is StateKind.OPAQUE:
            raw = (value.txid, value.curr, value.prev) if self._plain else \
                (value.txid, *self._fields(value.curr), *self._fields(value.prev))
        elif kind is StateKind.TRANSACTIONAL:
            raw = (value.txid, value.val) if self._plain else (value.txid, *self._fields(value.val))
        else:
            raw = (value,) if self._plain else self._fields(value)
        return tuple([None if v is None else f(v) for f, v in zip(self._stored_enc, raw, strict=True)])

    def value_of(self, row: Row | None) -> Any:
        """The stored value of the stored columns ``row`` (None when absent)."""
        if row is None:
            return None
        row = tuple([None if v is None else f(v) for f, v in zip(self._stored_dec, row, strict=True)])
        kind, n = self.spec.kind, self._width
        if kind is StateKind.OPAQUE:
            if row[0] is None:
                return None
            return OpaqueValue(row[0], self._value(row[1:1 + n]), self._value(row[1 + n:]))
        if kind is StateKind.TRANSACTIONAL:
            return None if row[0] is None else TransactionalValue(row[0], self._value(row[1:]))
        return self._value(row)

    def _fields(self, v: Any) -> tuple[Any, ...]:
        if self.spec.scalar:
            parts: tuple[Any, ...] = (v,)
        elif v is None:
            parts = (None,) * len(self.spec.value)
        elif not isinstance(v, tuple) or isinstance(v, Stamped) or len(v) != len(self.spec.value):
            msg = f"table {self.spec.table}: value {v!r} must be a tuple of {len(self.spec.value)}"
            raise TypeError(msg)
        else:
            parts = v
        out: list[Any] = []
        for c, p in zip(self.spec.value, parts, strict=True):
            if c.stamped:
                stamped = None if p is None else Stamped.of(p)
                out += (None, None) if stamped is None else (stamped.value, stamped.at)
            else:
                out.append(p)
        return tuple(out)

    def _value(self, fields: Row) -> Any:
        parts, i = [], 0
        for c in self.spec.value:
            if c.stamped:
                value, at = fields[i], fields[i + 1]
                parts.append(None if at is None else Stamped.parse_at(value, at))
                i += 2
            else:
                parts.append(fields[i])
                i += 1
        if self.spec.scalar:
            return parts[0]
        return None if all(f is None for f in parts) else tuple(parts)
