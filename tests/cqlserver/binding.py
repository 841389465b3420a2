"""Bind markers: their types (prepared metadata), partition-key indexes, values.

Cassandra names a marker after what it binds: the column (`pk = ?`), `in(pk)`
for `pk IN ?`, `[ttl]`, `[timestamp]`, `[limit]`. The driver needs these types
to serialise values, and the partition-key indexes to route token-aware.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cql import ast
from .errors import InvalidRequest
from .schema import Catalog, Table
from .types import BIGINT, INT, ColumnSpec, CqlType, list_of
from .wire import UNSET


@dataclass(frozen=True)
class Variable:
    spec: ColumnSpec
    is_column: bool  # binds a column value directly (counts for partition-key routing)
    marker_name: str | None = None


def resolve_table(catalog: Catalog, name: ast.TableName, keyspace: str | None) -> Table:
    return catalog.table(name.keyspace or keyspace, name.name)


def _modifications(stmt: ast.Statement) -> list[ast.Modification]:
    if isinstance(stmt, ast.Batch):
        return list(stmt.statements)
    if isinstance(stmt, (ast.Insert, ast.Update, ast.Delete)):
        return [stmt]
    return []


def collect_variables(parsed: ast.Parsed, catalog: Catalog, keyspace: str | None) -> list[Variable]:
    """One Variable per marker, indexed by marker position."""
    found: dict[int, Variable] = {}
    stmt = parsed.statement

    def add(term: Any, table: Table, name: str, type_: CqlType, is_column: bool) -> None:
        if isinstance(term, ast.Marker):
            spec = ColumnSpec(table.keyspace, table.name, term.name or name, type_)
            found[term.index] = Variable(spec, is_column and term.name is None, term.name)

    def relations(table: Table, rels: list[ast.Relation]) -> None:
        for rel in rels:
            col = table.column(rel.column)
            if rel.op == "IN":
                if isinstance(rel.value, ast.Marker):
                    add(rel.value, table, f"in({col.name})", list_of(col.type), False)
                else:
                    for term in rel.value:
                        add(term, table, col.name, col.type, True)
            else:
                add(rel.value, table, col.name, col.type, True)

    def attrs(table: Table, ttl: Any, timestamp: Any) -> None:
        add(ttl, table, "[ttl]", INT, False)
        add(timestamp, table, "[timestamp]", BIGINT, False)

    if isinstance(stmt, ast.Select):
        table = resolve_table(catalog, stmt.table, keyspace)
        relations(table, stmt.where)
        add(stmt.limit, table, "[limit]", INT, False)
    for mod in _modifications(stmt):
        table = resolve_table(catalog, mod.table, keyspace)
        if isinstance(mod, ast.Insert):
            for name, term in zip(mod.columns, mod.values, strict=False):
                col = table.column(name)
                add(term, table, col.name, col.type, True)
            attrs(table, mod.ttl, mod.timestamp)
        elif isinstance(mod, ast.Update):
            attrs(table, mod.ttl, mod.timestamp)
            for name, term in mod.assignments:
                col = table.column(name)
                add(term, table, col.name, col.type, True)
            relations(table, mod.where)
            relations(table, mod.conditions)
        else:
            attrs(table, None, mod.timestamp)
            relations(table, mod.where)
            relations(table, mod.conditions)
    if isinstance(stmt, ast.Batch) and stmt.timestamp is not None:
        first = _modifications(stmt)[0] if stmt.statements else None
        if first is not None:
            attrs(resolve_table(catalog, first.table, keyspace), None, stmt.timestamp)
    missing = [i for i in range(parsed.marker_count) if i not in found]
    if missing:
        raise InvalidRequest("Bind markers are only supported for values of known columns here")
    return [found[i] for i in range(parsed.marker_count)]


def partition_key_indexes(variables: list[Variable], table: Table | None) -> list[int]:
    """Index of the first marker binding each partition-key column, or [] if any is missing."""
    if table is None:
        return []
    indexes: list[int] = []
    for col in table.partition_key:
        idx = next((i for i, v in enumerate(variables)
                    if v.is_column and v.spec.name == col.name and v.spec.table == table.name
                    and v.spec.keyspace == table.keyspace), None)
        if idx is None:
            return []
        indexes.append(idx)
    return indexes


def decode_values(variables: list[Variable], raw: list[Any], names: list[str] | None = None) -> list[Any]:
    """Decode wire values to Python (None = null, UNSET kept) in marker order."""
    if names is not None:
        by_name = dict(zip(names, raw, strict=False))
        ordered = []
        for var in variables:
            key = (var.marker_name or var.spec.name)
            if key not in by_name:
                raise InvalidRequest(f"Missing value for bind variable {key}")
            ordered.append(by_name[key])
        raw = ordered
    if len(raw) != len(variables):
        raise InvalidRequest(f"There were {len(variables)} markers(?) in CQL but {len(raw)} bound variables")
    out: list[Any] = []
    for var, value in zip(variables, raw, strict=False):
        if value is None or value is UNSET:
            out.append(value)
            continue
        try:
            out.append(var.spec.type.decode(value))
        except InvalidRequest as exc:
            raise InvalidRequest(f"Exception while binding column {var.spec.name}: {exc.message}") from None
    return out


class Bindings:
    """Evaluates terms of one execution: markers from bound values, literals by type."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def value(self, term: ast.Term, type_: CqlType) -> Any:
        if isinstance(term, ast.Marker):
            return self.values[term.index]
        if term.kind == "null":
            return None
        return type_.from_literal(term.kind, term.value)

    def in_values(self, rel: ast.Relation, type_: CqlType, what: Callable[[], str]) -> list[Any]:
        if isinstance(rel.value, ast.Marker):
            values = self.values[rel.value.index]
            if values is UNSET:
                raise InvalidRequest(f"Invalid unset value for {what()}")
            if values is None:
                raise InvalidRequest(f"Invalid null value for {what()}")
            return list(values)
        return [self.value(term, type_) for term in rel.value]
