"""WHERE clauses -> partition keys to visit and predicates on rows.

Restrictions are classified the way Cassandra does (partition key EQ/IN,
clustering prefix + slice, everything else is filtering) so that reads and
writes can reject the same shapes Cassandra rejects.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from .binding import Bindings
from .cql import ast
from .errors import InvalidRequest
from .schema import CLUSTERING, PARTITION_KEY, Column, Table
from .types import compare
from .wire import UNSET

SLICE_OPS = ("<", "<=", ">", ">=")
FILTERING_MESSAGE = ("Cannot execute this query as it might involve data filtering and thus may have "
                     "unpredictable performance. If you want to execute this query despite the "
                     "performance unpredictability, use ALLOW FILTERING")


@dataclass(frozen=True)
class Restriction:
    column: Column
    op: str  # =, <, <=, >, >=, IN
    value: Any  # list for IN

    def matches(self, current: Any) -> bool:
        if current is None:
            return False
        if self.op == "IN":
            return any(compare(self.column.type, current, v) == 0 for v in self.value)
        cmp = compare(self.column.type, current, self.value)
        return {"=": cmp == 0, "<": cmp < 0, "<=": cmp <= 0, ">": cmp > 0, ">=": cmp >= 0}[self.op]


@dataclass
class Restrictions:
    table: Table
    partition: list[Restriction] = field(default_factory=list)
    clustering: list[Restriction] = field(default_factory=list)
    other: list[Restriction] = field(default_factory=list)

    # -- partition key ---------------------------------------------------
    def partition_fully_restricted(self) -> bool:
        """Every partition-key column restricted by EQ/IN (a key lookup, no scan)."""
        restricted = {r.column.name for r in self.partition if r.op in ("=", "IN")}
        return all(c.name in restricted for c in self.table.partition_key) and all(
            r.op in ("=", "IN") for r in self.partition)

    def has_partition_in(self) -> bool:
        return any(r.op == "IN" for r in self.partition)

    def partition_keys(self) -> list[tuple[Any, ...]]:
        """Cartesian product of EQ/IN values, in the order given (duplicates removed)."""
        choices = []
        for col in self.table.partition_key:
            values: list[Any] | None = None
            for r in self.partition:
                if r.column.name == col.name:
                    vals = [r.value] if r.op == "=" else list(r.value)
                    values = vals if values is None else [v for v in values if v in vals]
            choices.append(values or [])
        return list(dict.fromkeys(itertools.product(*choices)))

    # -- clustering --------------------------------------------------------
    def clustering_is_prefix_slice(self) -> bool:
        """Restricted clustering columns form EQ/IN prefix + optional trailing slice."""
        by_col: dict[str, list[Restriction]] = {}
        for r in self.clustering:
            by_col.setdefault(r.column.name, []).append(r)
        seen_slice = False
        for col in self.table.clustering:
            rs = by_col.pop(col.name, [])
            if not rs:
                break
            if seen_slice:
                return False
            if any(r.op in SLICE_OPS for r in rs):
                if any(r.op not in SLICE_OPS for r in rs):
                    return False
                seen_slice = True
        return not by_col

    def clustering_all_eq(self) -> bool:
        names = {r.column.name for r in self.clustering if r.op in ("=", "IN")}
        return (all(c.name in names for c in self.table.clustering)
                and all(r.op in ("=", "IN") for r in self.clustering))

    def clustering_keys(self) -> list[tuple[Any, ...]]:
        choices = []
        for col in self.table.clustering:
            values: list[Any] = []
            for r in self.clustering:
                if r.column.name == col.name:
                    values = [r.value] if r.op == "=" else list(r.value)
            choices.append(values)
        return list(dict.fromkeys(itertools.product(*choices)))

    def has_clustering_in(self) -> bool:
        return any(r.op == "IN" for r in self.clustering)

    def matches_clustering(self, ck: tuple[Any, ...]) -> bool:
        positions = {c.name: i for i, c in enumerate(self.table.clustering)}
        return all(r.matches(ck[positions[r.column.name]]) for r in self.clustering)


def build_restrictions(table: Table, relations: list[ast.Relation], bindings: Bindings) -> Restrictions:
    """Resolve relation terms to values and sort them by the kind of column restricted."""
    result = Restrictions(table)
    for rel in relations:
        col = table.column(rel.column)
        if rel.op == "!=":
            raise InvalidRequest(f'Unsupported "!=" relation: {col.name} != <value>')
        if rel.op == "IN":
            values = bindings.in_values(rel, col.type, lambda: f"column {col.name}")  # noqa: B023 - called now
            if any(v is None for v in values):
                raise InvalidRequest(f"Invalid null value in condition for column {col.name}")
            restriction = Restriction(col, "IN", values)
        else:
            value = bindings.value(rel.value, col.type)
            if value is UNSET:
                raise InvalidRequest(f"Invalid unset value for column {col.name}")
            if value is None:
                raise InvalidRequest(f"Invalid null value in condition for column {col.name}")
            restriction = Restriction(col, rel.op, value)
        if col.kind == PARTITION_KEY:
            result.partition.append(restriction)
        elif col.kind == CLUSTERING:
            result.clustering.append(restriction)
        else:
            result.other.append(restriction)
    return result
