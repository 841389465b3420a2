"""INSERT / UPDATE / DELETE: validate like Cassandra, plan the mutation, apply it.

A `WritePlan` is a fully-resolved mutation (keys, cell values, TTL, conditions).
Planning never touches data, so a conditional batch can plan every statement,
check all conditions, and only then apply (all-or-nothing).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .binding import Bindings
from .cql import ast
from .errors import InvalidRequest
from .restrictions import SLICE_OPS, Restrictions, build_restrictions
from .schema import CLUSTERING, PARTITION_KEY, STATIC, Column, Table
from .storage import Cell, Row, TableData
from .types import BIGINT, INT
from .wire import UNSET

MAX_TTL = 20 * 365 * 24 * 60 * 60  # Cassandra's 20-year cap


@dataclass(frozen=True)
class Condition:
    """One `IF column op value` (value is a list for IN)."""

    column: Column
    op: str
    value: Any


@dataclass
class WritePlan:
    table: Table
    kind: str  # insert | update | delete
    partition_keys: list[tuple]
    clustering_keys: list[tuple] | None  # None: statement addresses the partition / static row only
    clustering_range: Restrictions | None = None  # DELETE with a clustering prefix or slice
    values: dict[str, Any] = field(default_factory=dict)  # column -> value, None deletes the cell
    deleted_columns: list[str] = field(default_factory=list)
    ttl: int | None = None
    timestamp: int = 0  # microseconds
    custom_timestamp: bool = False
    if_exists: bool = False
    if_not_exists: bool = False
    conditions: list[Condition] = field(default_factory=list)

    @property
    def conditional(self) -> bool:
        return self.if_exists or self.if_not_exists or bool(self.conditions)

    @property
    def updates_static(self) -> bool:
        """Cassandra's updatesStaticRow(): some operation targets a static column."""
        cols = list(self.values) + self.deleted_columns
        return any(self.table.columns[c].kind == STATIC for c in cols)

    @property
    def updates_regular(self) -> bool:
        """Cassandra's updatesRegularRows(): no clustering columns, or clustering restricted."""
        return not self.table.clustering or self.clustering_keys is not None or self.clustering_range is not None


def _attribute(bindings: Bindings, term: ast.Term | None, type_: Any) -> Any:
    if term is None:
        return None
    value = bindings.value(term, type_)
    return None if value is UNSET else value


def _ttl(table: Table, bindings: Bindings, term: ast.Term | None) -> int | None:
    ttl = _attribute(bindings, term, INT)
    if ttl is None:
        ttl = table.default_ttl
    if ttl < 0:
        raise InvalidRequest(f"A TTL must be greater or equal to 0, but was {ttl}")
    if ttl > MAX_TTL:
        raise InvalidRequest(f"ttl is too large. requested ({ttl}) maximum ({MAX_TTL})")
    return ttl or None


def _conditions(table: Table, rels: list[ast.Relation], bindings: Bindings) -> list[Condition]:
    out = []
    for rel in rels:
        col = table.column(rel.column)
        if col.kind in (PARTITION_KEY, CLUSTERING):
            raise InvalidRequest(f"PRIMARY KEY column '{col.name}' cannot have IF conditions")
        if rel.op == "IN":
            value: Any = bindings.in_values(rel, col.type, lambda: f"IN condition on {col.name}")  # noqa: B023 - called now
        else:
            value = bindings.value(rel.value, col.type)
            if value is UNSET:
                raise InvalidRequest(f"Invalid 'unset' value in condition on {col.name}")
            if value is None and rel.op in SLICE_OPS:
                raise InvalidRequest(f'Invalid comparison with null for operator "{rel.op}"')
        out.append(Condition(col, rel.op, value))
    return out


def _partition_keys(table: Table, restr: Restrictions) -> list[tuple]:
    restricted = {r.column.name for r in restr.partition}
    missing = [c.name for c in table.partition_key if c.name not in restricted]
    if missing:
        raise InvalidRequest(f"Some partition key parts are missing: {', '.join(missing)}")
    if any(r.op not in ("=", "IN") for r in restr.partition):
        raise InvalidRequest("Only EQ and IN relation are supported on the partition key "
                             "(unless you use the token() function)")
    return restr.partition_keys()


def _check_where(table: Table, restr: Restrictions) -> None:
    if restr.other:
        names = ", ".join(r.column.name for r in restr.other)
        raise InvalidRequest(f"Non PRIMARY KEY columns found in where clause: {names} ")


def _clustering_for_update(table: Table, restr: Restrictions, static_only: bool, verb: str) -> list[tuple] | None:
    if static_only and table.clustering:
        if restr.clustering:
            raise InvalidRequest(f"Invalid restrictions on clustering columns since the {verb} statement "
                                 "modifies only static columns")
        return None
    restricted = {r.column.name for r in restr.clustering if r.op in ("=", "IN")}
    missing = [c.name for c in table.clustering if c.name not in restricted]
    if missing or any(r.op not in ("=", "IN") for r in restr.clustering):
        raise InvalidRequest(f"Some clustering keys are missing: {', '.join(missing) or 'slice'}")
    return restr.clustering_keys()


def _timestamp(bindings: Bindings, term: ast.Term | None, default: int | None) -> tuple[int, bool]:
    custom = _attribute(bindings, term, BIGINT)
    if custom is not None:
        return int(custom), True
    return (default if default is not None else time.time_ns() // 1000), False


def plan_write(stmt: ast.Modification, table: Table, bindings: Bindings, default_timestamp: int | None) -> WritePlan:
    """Resolve one modification statement into a WritePlan (no data access)."""
    if isinstance(stmt, ast.Insert):
        return _plan_insert(stmt, table, bindings, default_timestamp)
    if isinstance(stmt, ast.Update):
        return _plan_update(stmt, table, bindings, default_timestamp)
    return _plan_delete(stmt, table, bindings, default_timestamp)


def _plan_insert(stmt: ast.Insert, table: Table, bindings: Bindings, default_ts: int | None) -> WritePlan:
    if len(set(stmt.columns)) != len(stmt.columns):
        raise InvalidRequest("The column names contains duplicates")
    key: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for name, term in zip(stmt.columns, stmt.values, strict=False):
        col = table.column(name)
        value = bindings.value(term, col.type)
        if col.is_primary_key:
            if value is None or value is UNSET:
                raise InvalidRequest(f"Invalid {'null' if value is None else 'unset'} value in condition "
                                     f"for column {col.name}")
            key[name] = value
        elif value is not UNSET:
            values[name] = value
    missing_pk = [c.name for c in table.partition_key if c.name not in key]
    if missing_pk:
        raise InvalidRequest(f"Some partition key parts are missing: {', '.join(missing_pk)}")
    missing_ck = [c.name for c in table.clustering if c.name not in key]
    static_only = bool(values) and all(table.columns[c].kind == STATIC for c in values)
    if missing_ck and not (static_only and len(missing_ck) == len(table.clustering)):
        raise InvalidRequest(f"Some clustering keys are missing: {', '.join(missing_ck)}")
    ts, custom = _timestamp(bindings, stmt.timestamp, default_ts)
    return WritePlan(
        table, "insert",
        [tuple(key[c.name] for c in table.partition_key)],
        None if missing_ck else [tuple(key[c.name] for c in table.clustering)],
        values=values, ttl=_ttl(table, bindings, stmt.ttl), timestamp=ts, custom_timestamp=custom,
        if_not_exists=stmt.if_not_exists)


def _plan_update(stmt: ast.Update, table: Table, bindings: Bindings, default_ts: int | None) -> WritePlan:
    values: dict[str, Any] = {}
    for name, term in stmt.assignments:
        col = table.column(name)
        if col.is_primary_key:
            raise InvalidRequest(f"PRIMARY KEY part {col.name} found in SET part")
        value = bindings.value(term, col.type)
        if value is not UNSET:
            values[name] = value
    restr = build_restrictions(table, stmt.where, bindings)
    _check_where(table, restr)
    static_only = all(table.column(n).kind == STATIC for n, _ in stmt.assignments)
    conditions = _conditions(table, stmt.conditions, bindings)
    if static_only and any(c.column.kind != STATIC for c in conditions):
        static_only = False
    ts, custom = _timestamp(bindings, stmt.timestamp, default_ts)
    return WritePlan(
        table, "update", _partition_keys(table, restr),
        _clustering_for_update(table, restr, static_only, "UPDATE"),
        values=values, ttl=_ttl(table, bindings, stmt.ttl), timestamp=ts, custom_timestamp=custom,
        if_exists=stmt.if_exists, conditions=conditions)


def _plan_delete(stmt: ast.Delete, table: Table, bindings: Bindings, default_ts: int | None) -> WritePlan:
    columns = []
    for name in stmt.columns:
        col = table.column(name)
        if col.is_primary_key:
            raise InvalidRequest(f"Invalid identifier {col.name} for deletion (should not be a PRIMARY KEY part)")
        columns.append(col.name)
    restr = build_restrictions(table, stmt.where, bindings)
    _check_where(table, restr)
    pks = _partition_keys(table, restr)
    conditions = _conditions(table, stmt.conditions, bindings)
    ts, custom = _timestamp(bindings, stmt.timestamp, default_ts)
    plan = WritePlan(table, "delete", pks, None, deleted_columns=columns, timestamp=ts, custom_timestamp=custom,
                     if_exists=stmt.if_exists, conditions=conditions)
    if not table.clustering:
        plan.clustering_keys = [()]
        return plan
    if restr.clustering and restr.clustering_all_eq():
        plan.clustering_keys = restr.clustering_keys()
        return plan
    if restr.clustering and not restr.clustering_is_prefix_slice():
        raise InvalidRequest("PRIMARY KEY column cannot be restricted as preceding column is not restricted")
    regular_columns = [c for c in columns if table.columns[c].kind != STATIC]
    if regular_columns:
        if restr.clustering:
            raise InvalidRequest("Range deletions are not supported for specific columns")
        raise InvalidRequest("Some clustering keys are missing: " + ", ".join(c.name for c in table.clustering))
    if plan.conditional and (restr.clustering or plan.if_exists
                             or any(c.column.kind != STATIC for c in conditions)):
        raise InvalidRequest("DELETE statements must restrict all PRIMARY KEY columns with equality relations "
                             "in order to use IF conditions on non static columns")
    if restr.clustering:
        plan.clustering_range = restr
    return plan


def _cell(value: Any, plan: WritePlan, now: float) -> Cell:
    expires = now + plan.ttl if plan.ttl else None
    return Cell(value, expires, plan.timestamp, plan.ttl)


def _write_cell(cells: dict[str, Cell], name: str, value: Any, plan: WritePlan, now: float) -> None:
    if value is None:
        cells.pop(name, None)
    else:
        cells[name] = _cell(value, plan, now)


def apply_write(plan: WritePlan, data: TableData, now: float) -> None:
    """Apply a plan to storage (conditions are the caller's business)."""
    table = plan.table
    for pk in plan.partition_keys:
        part = data.get_or_create(pk)
        if plan.kind == "delete":
            _apply_delete(plan, data, pk, now)
        else:
            for name, value in plan.values.items():
                if table.columns[name].kind == STATIC:
                    _write_cell(part.static, name, value, plan, now)
            for ck in plan.clustering_keys or []:
                row = part.rows.get(ck)
                if row is None:
                    row = part.rows[ck] = Row()
                if plan.kind == "insert":
                    row.marker = _cell(True, plan, now)
                for name, value in plan.values.items():
                    if table.columns[name].kind != STATIC:
                        _write_cell(row.cells, name, value, plan, now)
        data.purge(pk, now)


def _apply_delete(plan: WritePlan, data: TableData, pk: tuple, now: float) -> None:
    part = data.get_or_create(pk)
    table = plan.table
    statics = [c for c in plan.deleted_columns if table.columns[c].kind == STATIC]
    regulars = [c for c in plan.deleted_columns if table.columns[c].kind != STATIC]
    for name in statics:
        part.static.pop(name, None)
    if plan.deleted_columns:
        for ck in plan.clustering_keys or []:
            row = part.rows.get(ck)
            if row is not None:
                for name in regulars:
                    row.cells.pop(name, None)
        return
    if plan.clustering_range is not None:
        for ck in [ck for ck in part.rows if plan.clustering_range.matches_clustering(ck)]:
            del part.rows[ck]
    elif plan.clustering_keys is not None and table.clustering:
        for ck in plan.clustering_keys:
            part.rows.pop(ck, None)
    else:
        data.partitions.pop(pk, None)
