"""Syntax tree of the CQL subset the server understands.

Parsing produces these plain dataclasses; binding types to markers and
executing them is the executor's job. Identifiers are already normalised
(unquoted ones lower-cased, quoted ones verbatim).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Marker:
    """A bind marker: `?` (name None) or `:name`; `index` is its position in the statement."""

    index: int
    name: str | None = None


@dataclass(frozen=True)
class Literal:
    """A constant. kind: string|int|float|bool|null|uuid|blob|map|set|list.

    Collection literals hold lists of (kind, value) pairs (map: pairs of pairs).
    """

    kind: str
    value: Any


Term = Marker | Literal


@dataclass(frozen=True)
class TableName:
    keyspace: str | None
    name: str


@dataclass(frozen=True)
class Relation:
    """`column op term`, or `column IN (terms...)` / `column IN ?`.

    For IN, `value` is a tuple of terms or a single Marker bound to a list.
    """

    column: str
    op: str
    value: Any


@dataclass(frozen=True)
class Selector:
    """One item of a select clause: a column, or a function over a column."""

    column: str | None
    function: str | None = None  # 'count', 'ttl', 'writetime'
    alias: str | None = None


@dataclass
class Select:
    table: TableName
    selectors: list[Selector] | None  # None means `*`
    where: list[Relation] = field(default_factory=list)
    order_by: list[tuple[str, bool]] = field(default_factory=list)  # (column, ascending)
    limit: Term | None = None
    allow_filtering: bool = False
    distinct: bool = False


@dataclass
class Insert:
    table: TableName
    columns: list[str]
    values: list[Term]
    if_not_exists: bool = False
    ttl: Term | None = None
    timestamp: Term | None = None


@dataclass
class Update:
    table: TableName
    assignments: list[tuple[str, Term]]
    where: list[Relation]
    if_exists: bool = False
    conditions: list[Relation] = field(default_factory=list)
    ttl: Term | None = None
    timestamp: Term | None = None


@dataclass
class Delete:
    table: TableName
    columns: list[str]
    where: list[Relation]
    if_exists: bool = False
    conditions: list[Relation] = field(default_factory=list)
    timestamp: Term | None = None


Modification = Insert | Update | Delete


@dataclass
class Batch:
    kind: str  # LOGGED | UNLOGGED | COUNTER
    statements: list[Modification]
    timestamp: Term | None = None


@dataclass
class CreateKeyspace:
    name: str
    replication: dict[str, str]
    durable_writes: bool = True
    if_not_exists: bool = False


@dataclass
class DropKeyspace:
    name: str
    if_exists: bool = False


@dataclass
class Use:
    keyspace: str


@dataclass
class ColumnDef:
    name: str
    type: str
    static: bool = False


@dataclass
class CreateTable:
    table: TableName
    columns: list[ColumnDef]
    partition_key: list[str]
    clustering: list[str]
    clustering_order: dict[str, bool] = field(default_factory=dict)  # column -> ascending
    options: dict[str, Any] = field(default_factory=dict)
    if_not_exists: bool = False


@dataclass
class DropTable:
    table: TableName
    if_exists: bool = False


@dataclass
class Truncate:
    table: TableName


Statement = Select | Insert | Update | Delete | Batch | CreateKeyspace | DropKeyspace | Use | CreateTable | DropTable | Truncate


@dataclass
class Parsed:
    """A parsed statement plus the number of bind markers it contains."""

    statement: Statement
    marker_count: int
