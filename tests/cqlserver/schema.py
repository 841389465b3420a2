"""Schema objects: keyspaces, tables, columns, and the catalog that owns them.

The catalog is what DDL mutates and what the system_schema tables describe, so
the driver's `cluster.metadata` mirrors exactly what tests created.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .errors import AlreadyExistsError, InvalidRequest
from .types import CqlType, Desc

PARTITION_KEY = "partition_key"
CLUSTERING = "clustering"
STATIC = "static"
REGULAR = "regular"


@dataclass(frozen=True)
class Column:
    name: str
    type: CqlType
    kind: str  # partition_key | clustering | static | regular
    position: int = -1  # index within the partition key / clustering key
    descending: bool = False  # clustering order

    @property
    def is_primary_key(self) -> bool:
        return self.kind in (PARTITION_KEY, CLUSTERING)


RowProvider = Callable[[], Iterable[dict[str, Any]]]


@dataclass
class Table:
    keyspace: str
    name: str
    columns: dict[str, Column]
    options: dict[str, Any] = field(default_factory=dict)
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    provider: RowProvider | None = None  # system tables: rows computed on read

    @property
    def qualified(self) -> str:
        return f"{self.keyspace}.{self.name}"

    @cached_property
    def partition_key(self) -> list[Column]:
        return sorted((c for c in self.columns.values() if c.kind == PARTITION_KEY), key=lambda c: c.position)

    @cached_property
    def clustering(self) -> list[Column]:
        return sorted((c for c in self.columns.values() if c.kind == CLUSTERING), key=lambda c: c.position)

    @cached_property
    def statics(self) -> list[Column]:
        return sorted((c for c in self.columns.values() if c.kind == STATIC), key=lambda c: c.name)

    @cached_property
    def regulars(self) -> list[Column]:
        return sorted((c for c in self.columns.values() if c.kind == REGULAR), key=lambda c: c.name)

    @cached_property
    def primary_key(self) -> list[Column]:
        return self.partition_key + self.clustering

    def select_order(self) -> list[Column]:
        """Column order of `SELECT *`: partition key, clustering, statics, regulars."""
        return self.partition_key + self.clustering + self.statics + self.regulars

    @property
    def default_ttl(self) -> int:
        return int(self.options.get("default_time_to_live", 0) or 0)

    def column(self, name: str) -> Column:
        try:
            return self.columns[name]
        except KeyError:
            raise InvalidRequest(f"Undefined column name {name} in table {self.qualified}") from None

    def clustering_sort_key(self, ck: tuple[Any, ...]) -> tuple[Any, ...]:
        """Sort key for a clustering tuple honouring each column's ASC/DESC order."""
        key = []
        for col, value in zip(self.clustering, ck, strict=False):
            k = col.type.sort_key(value)
            key.append(Desc(k) if col.descending else k)
        return tuple(key)


@dataclass
class Keyspace:
    name: str
    replication: dict[str, str]
    durable_writes: bool = True
    tables: dict[str, Table] = field(default_factory=dict)
    system: bool = False


def normalize_replication(replication: dict[str, str]) -> dict[str, str]:
    """Expand short strategy names the way Cassandra stores them."""
    result = dict(replication)
    cls = result.get("class")
    if not cls:
        raise InvalidRequest("Missing replication strategy class")
    if "." not in cls:
        if cls not in ("SimpleStrategy", "NetworkTopologyStrategy", "LocalStrategy", "EverywhereStrategy"):
            raise InvalidRequest(f"Unable to find replication strategy class '{cls}'")
        result["class"] = f"org.apache.cassandra.locator.{cls}"
    if result["class"].endswith("SimpleStrategy") and "replication_factor" not in result:
        raise InvalidRequest("SimpleStrategy requires a replication_factor strategy option.")
    return result


class Catalog:
    """All keyspaces; `version` changes on every schema change (system.local.schema_version)."""

    def __init__(self) -> None:
        self.keyspaces: dict[str, Keyspace] = {}
        self.version = uuid.uuid4()

    def bump(self) -> None:
        self.version = uuid.uuid4()

    def keyspace(self, name: str) -> Keyspace:
        try:
            return self.keyspaces[name]
        except KeyError:
            raise InvalidRequest(f"Keyspace '{name}' does not exist") from None

    def table(self, keyspace: str | None, name: str) -> Table:
        if keyspace is None:
            raise InvalidRequest("No keyspace has been specified. USE a keyspace, or explicitly "
                                 "specify keyspace.tablename")
        ks = self.keyspace(keyspace)
        try:
            return ks.tables[name]
        except KeyError:
            raise InvalidRequest(f"table {name} does not exist") from None

    def add_keyspace(self, ks: Keyspace, if_not_exists: bool = False) -> bool:
        if ks.name in self.keyspaces:
            if if_not_exists:
                return False
            raise AlreadyExistsError(ks.name)
        self.keyspaces[ks.name] = ks
        self.bump()
        return True

    def drop_keyspace(self, name: str, if_exists: bool = False) -> bool:
        ks = self.keyspaces.get(name)
        if ks is None:
            if if_exists:
                return False
            raise InvalidRequest(f"Keyspace '{name}' doesn't exist")
        if ks.system:
            raise InvalidRequest(f"Cannot drop system keyspace {name}")
        del self.keyspaces[name]
        self.bump()
        return True

    def add_table(self, table: Table, if_not_exists: bool = False) -> bool:
        ks = self.keyspace(table.keyspace)
        if table.name in ks.tables:
            if if_not_exists:
                return False
            raise AlreadyExistsError(table.keyspace, table.name)
        ks.tables[table.name] = table
        self.bump()
        return True

    def drop_table(self, keyspace: str, name: str, if_exists: bool = False) -> Table | None:
        ks = self.keyspace(keyspace)
        table = ks.tables.get(name)
        if table is None:
            if if_exists:
                return None
            raise InvalidRequest(f"Table '{keyspace}.{name}' doesn't exist")
        if ks.system:
            raise InvalidRequest(f"Cannot drop system table {keyspace}.{name}")
        del ks.tables[name]
        self.bump()
        return table
