"""SELECT execution: selection, restriction checks, ordering, LIMIT, paging.

Paging state is a position (partition key bytes + last clustering key + rows
returned so far), so pages stay correct when rows change between pages, the
way Cassandra's paging state behaves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .binding import Bindings
from .cql import ast
from .errors import InvalidRequest, ProtocolError
from .restrictions import FILTERING_MESSAGE, Restrictions, build_restrictions
from .results import Rows
from .schema import CLUSTERING, PARTITION_KEY, STATIC, Column, Table
from .storage import Partition, Row, TableData, serialize_partition_key, token_of
from .types import BIGINT, INT, ColumnSpec
from .wire import SERIAL_CONSISTENCIES, UNSET, Reader, Writer

Extract = Callable[[tuple, Partition, "tuple | None", "Row | None"], Any]


@dataclass
class ReadOptions:
    consistency: str
    now: float
    page_size: int | None = None
    paging_state: bytes | None = None


@dataclass
class _Selection:
    specs: list[ColumnSpec]
    extractors: list[Extract]
    count: bool = False
    wants_static: bool = True  # show partitions that only have static content


@dataclass
class _Cursor:
    order: tuple[int, bytes]
    clustering: tuple | None
    emitted: int


def _column_extractor(col: Column, now: float) -> Extract:
    if col.kind == PARTITION_KEY:
        return lambda pk, part, ck, row: pk[col.position]
    if col.kind == CLUSTERING:
        return lambda pk, part, ck, row: None if ck is None else ck[col.position]
    if col.kind == STATIC:
        return lambda pk, part, ck, row: part.static_value(col.name, now)
    return lambda pk, part, ck, row: None if row is None else row.value(col.name, now)


def _cell_function(function: str, col: Column, now: float) -> Extract:
    if col.kind in (PARTITION_KEY, CLUSTERING):
        raise InvalidRequest(f"Cannot use selection function {function} on PRIMARY KEY part {col.name}")

    def extract(pk: tuple, part: Partition, ck: tuple | None, row: Row | None) -> Any:
        cell = part.static.get(col.name) if col.kind == STATIC else (row.cell(col.name, now) if row else None)
        if cell is None or not cell.live(now):
            return None
        if function == "writetime":
            return cell.written
        return None if cell.expires is None else max(0, math.ceil(cell.expires - now))

    return extract


def _selection(stmt: ast.Select, table: Table, now: float) -> _Selection:
    def spec(name: str, type_: Any) -> ColumnSpec:
        return ColumnSpec(table.keyspace, table.name, name, type_)

    if stmt.selectors is None:
        cols = table.select_order()
        if stmt.distinct:
            raise InvalidRequest("SELECT DISTINCT queries must only request partition key columns "
                                 "and/or static columns")
        return _Selection([spec(c.name, c.type) for c in cols], [_column_extractor(c, now) for c in cols])
    if any(s.function == "count" for s in stmt.selectors):
        if len(stmt.selectors) != 1:
            raise InvalidRequest("count(*) cannot be mixed with other selectors on this test server")
        return _Selection([spec(stmt.selectors[0].alias or "count", BIGINT)], [], count=True)
    specs, extractors, wants_static = [], [], False
    for sel in stmt.selectors:
        assert sel.column is not None
        col = table.column(sel.column)
        if stmt.distinct and col.kind not in (PARTITION_KEY, STATIC):
            raise InvalidRequest("SELECT DISTINCT queries must only request partition key columns "
                                 f"and/or static columns (not {col.name})")
        wants_static |= col.kind == STATIC
        if sel.function in ("ttl", "writetime"):
            specs.append(spec(sel.alias or f"{sel.function}({col.name})", INT if sel.function == "ttl" else BIGINT))
            extractors.append(_cell_function(sel.function, col, now))
        else:
            specs.append(spec(sel.alias or col.name, col.type))
            extractors.append(_column_extractor(col, now))
    return _Selection(specs, extractors, wants_static=wants_static)


def _validate(stmt: ast.Select, restr: Restrictions) -> None:
    needs_filtering = False
    if restr.partition and not restr.partition_fully_restricted():
        if any(r.op not in ("=", "IN") for r in restr.partition) and not stmt.allow_filtering:
            raise InvalidRequest("Only EQ and IN relation are supported on the partition key "
                                 "(unless you use the token() function or allow filtering)")
        needs_filtering = True
    if restr.clustering and (not restr.partition_fully_restricted() or not restr.clustering_is_prefix_slice()):
        needs_filtering = True
    if restr.other:
        needs_filtering = True
    if needs_filtering and not stmt.allow_filtering:
        raise InvalidRequest(FILTERING_MESSAGE)
    if stmt.distinct and (restr.clustering or any(r.column.kind != STATIC for r in restr.other)):
        raise InvalidRequest("SELECT DISTINCT with WHERE clause only supports restriction by partition key "
                             "and/or static columns.")


def _ordering(stmt: ast.Select, table: Table, restr: Restrictions) -> bool:
    """Validate ORDER BY; return True when rows must be iterated in reverse clustering order."""
    if not stmt.order_by:
        return False
    if not restr.partition_fully_restricted():
        raise InvalidRequest("ORDER BY is only supported when the partition key is restricted by an EQ or an IN.")
    reversed_flags = []
    for i, (name, ascending) in enumerate(stmt.order_by):
        col = table.column(name)
        if col.kind != CLUSTERING:
            raise InvalidRequest(f"Order by is currently only supported on the clustered columns of the "
                                 f"PRIMARY KEY, got {name}")
        if col.position != i:
            raise InvalidRequest("Order by currently only supports the ordering of columns following their "
                                 "declared order in the PRIMARY KEY")
        reversed_flags.append(ascending == col.descending)
    if len(set(reversed_flags)) > 1:
        raise InvalidRequest("Unsupported order by relation")
    return reversed_flags[0]


def _encode_state(table: Table, pk: tuple, ck: tuple | None, emitted: int) -> bytes:
    w = Writer().short_bytes(serialize_partition_key(table, pk))
    if ck is None:
        w.byte(0)
    else:
        w.byte(1).short(len(ck))
        for col, value in zip(table.clustering, ck, strict=False):
            w.bytes(col.type.encode(value))
    return w.int(emitted).getvalue()


def _decode_state(table: Table, state: bytes) -> _Cursor:
    try:
        r = Reader(state)
        key = r.short_bytes()
        ck = None
        if r.byte():
            raw = [r.bytes() for _ in range(r.short())]
            ck = tuple(col.type.decode(v or b"") for col, v in zip(table.clustering, raw, strict=False))
        return _Cursor((token_of(key), key), ck, r.int())
    except Exception:  # noqa: BLE001 - any undecodable paging state is the client's error, as in Cassandra
        raise ProtocolError("Invalid value for the paging state") from None


def _after_cursor(data: TableData, cursor: _Cursor, pk: tuple, ck: tuple | None, reverse: bool) -> bool:
    order = data.order_key(pk)
    if order != cursor.order:
        return order > cursor.order
    if ck is None or cursor.clustering is None:
        return False
    mine = data.table.clustering_sort_key(ck)
    theirs = data.table.clustering_sort_key(cursor.clustering)
    return mine < theirs if reverse else mine > theirs


def _candidates(stmt: ast.Select, data: TableData, restr: Restrictions, sel: _Selection, now: float,
                reverse: bool) -> Iterator[tuple[tuple, Partition, tuple | None, Row | None]]:
    """(pk, partition, clustering, row) for every result row, in result order."""
    keys = restr.partition_keys() if restr.partition_fully_restricted() else None
    static_ok = (not restr.clustering and all(r.column.kind == STATIC for r in restr.other)
                 and (sel.wants_static or sel.count or stmt.selectors is None or stmt.distinct))
    for pk in data.partition_keys(now, keys):
        if keys is None and not all(r.matches(pk[r.column.position]) for r in restr.partition):
            continue
        part = data.partitions[pk]
        if stmt.distinct:
            if all(r.matches(part.static_value(r.column.name, now)) for r in restr.other):
                yield pk, part, None, None
            continue
        any_row = False
        for ck, row in data.rows_in_order(part, now, reverse):
            any_row = True
            if not restr.matches_clustering(ck):
                continue
            if all(r.matches(_value(r.column, part, row, now)) for r in restr.other):
                yield pk, part, ck, row
        if not any_row and static_ok and part.static_live(now):  # noqa: SIM102  the nesting mirrors the protocol's rule
            if all(r.matches(part.static_value(r.column.name, now)) for r in restr.other):
                yield pk, part, None, None


def _value(col: Column, part: Partition, row: Row, now: float) -> Any:
    return part.static_value(col.name, now) if col.kind == STATIC else row.value(col.name, now)


def _limit(stmt: ast.Select, bindings: Bindings) -> int | None:
    if stmt.limit is None:
        return None
    value = bindings.value(stmt.limit, INT)
    if value is UNSET or value is None:
        return None
    if value <= 0:
        raise InvalidRequest("LIMIT must be strictly positive")
    return int(value)


def execute_select(stmt: ast.Select, table: Table, data: TableData, bindings: Bindings, opts: ReadOptions) -> Rows:
    now = opts.now
    if opts.consistency == "ANY":
        raise InvalidRequest("ANY ConsistencyLevel is only supported for writes")
    sel = _selection(stmt, table, now)
    restr = build_restrictions(table, stmt.where, bindings)
    _validate(stmt, restr)
    reverse = _ordering(stmt, table, restr)
    if opts.consistency in SERIAL_CONSISTENCIES:  # noqa: SIM102  the nesting mirrors the protocol's rule
        if not restr.partition_fully_restricted() or len(restr.partition_keys()) != 1:
            raise InvalidRequest("SERIAL/LOCAL_SERIAL consistency may only be requested for one partition at a time")
    limit = _limit(stmt, bindings)
    candidates = _candidates(stmt, data, restr, sel, now, reverse)

    if sel.count:
        return Rows(sel.specs, [[sum(1 for _ in candidates)]])

    post_order = bool(stmt.order_by) and restr.has_partition_in() and len(restr.partition_keys()) > 1
    page_size = opts.page_size if opts.page_size and opts.page_size > 0 else None
    if post_order:
        if page_size is not None and (limit is None or limit > page_size):
            raise InvalidRequest("Cannot page queries with both ORDER BY and a IN restriction on the partition "
                                 "key; you must either remove the ORDER BY or the IN and sort client side, or "
                                 "disable paging for this query")
        ordered = sorted(candidates, key=lambda c: table.clustering_sort_key(c[2] or ()), reverse=reverse)
        candidates = iter(ordered)

    cursor = _decode_state(table, opts.paging_state) if opts.paging_state else None
    emitted = cursor.emitted if cursor else 0
    out: list[list[Any]] = []
    last: tuple[tuple, tuple | None] | None = None
    paging_state = None
    for pk, part, ck, row in candidates:
        if cursor is not None and not _after_cursor(data, cursor, pk, ck, reverse):
            continue
        if limit is not None and emitted >= limit:
            break
        if page_size is not None and len(out) >= page_size:
            assert last is not None
            paging_state = _encode_state(table, last[0], last[1], emitted)
            break
        out.append([extract(pk, part, ck, row) for extract in sel.extractors])
        emitted += 1
        last = (pk, None if stmt.distinct else ck)
    return Rows(sel.specs, out, paging_state)

