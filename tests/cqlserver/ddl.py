"""Schema statements: CREATE/DROP KEYSPACE, CREATE/DROP TABLE, TRUNCATE, USE.

Each returns the RESULT Cassandra sends: Schema_change when something changed,
Void for a no-op `IF [NOT] EXISTS`, Set_keyspace for USE.
"""

from __future__ import annotations

from typing import Any

from .cql import ast
from .errors import InvalidRequest
from .results import Result, SchemaChange, SetKeyspace, Void
from .schema import CLUSTERING, PARTITION_KEY, REGULAR, STATIC, Catalog, Column, Keyspace, Table, normalize_replication
from .types import parse_type

TABLE_OPTION_DEFAULTS: dict[str, Any] = {
    "additional_write_policy": "99p",
    "bloom_filter_fp_chance": 0.01,
    "caching": {"keys": "ALL", "rows_per_partition": "NONE"},
    "cdc": False,
    "comment": "",
    "compaction": {"class": "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy",
                   "max_threshold": "32", "min_threshold": "4"},
    "compression": {"chunk_length_in_kb": "16", "class": "org.apache.cassandra.io.compress.LZ4Compressor"},
    "crc_check_chance": 1.0,
    "default_time_to_live": 0,
    "extensions": {},
    "gc_grace_seconds": 864000,
    "max_index_interval": 2048,
    "memtable_flush_period_in_ms": 0,
    "min_index_interval": 128,
    "read_repair": "BLOCKING",
    "speculative_retry": "99p",
}


def create_keyspace(catalog: Catalog, stmt: ast.CreateKeyspace) -> Result:
    ks = Keyspace(stmt.name, normalize_replication(stmt.replication), stmt.durable_writes)
    if catalog.add_keyspace(ks, stmt.if_not_exists):
        return SchemaChange("CREATED", "KEYSPACE", stmt.name)
    return Void()


def drop_keyspace(catalog: Catalog, stmt: ast.DropKeyspace) -> Result:
    if catalog.drop_keyspace(stmt.name, stmt.if_exists):
        return SchemaChange("DROPPED", "KEYSPACE", stmt.name)
    return Void()


def use(catalog: Catalog, stmt: ast.Use) -> Result:
    catalog.keyspace(stmt.keyspace)
    return SetKeyspace(stmt.keyspace)


def build_table(keyspace: str, stmt: ast.CreateTable) -> Table:
    """Validate a CREATE TABLE and produce the Table it describes."""
    defs = {c.name: c for c in stmt.columns}
    if len(defs) != len(stmt.columns):
        raise InvalidRequest("Duplicate column names in CREATE TABLE")
    for name in stmt.partition_key + stmt.clustering:
        if name not in defs:
            raise InvalidRequest(f"Unknown definition {name} referenced in PRIMARY KEY")
    if len(set(stmt.partition_key + stmt.clustering)) != len(stmt.partition_key) + len(stmt.clustering):
        raise InvalidRequest("Duplicate column in PRIMARY KEY")
    order = stmt.clustering_order
    for name in order:
        if name not in stmt.clustering:
            raise InvalidRequest(f"Only clustering key columns can be defined in CLUSTERING ORDER directive: {name}")
    if order and list(order) != stmt.clustering[:len(order)]:
        raise InvalidRequest("The order of columns in the CLUSTERING ORDER directive must match that of the "
                             "clustering columns")
    columns: dict[str, Column] = {}
    for pos, name in enumerate(stmt.partition_key):
        columns[name] = Column(name, parse_type(defs[name].type), PARTITION_KEY, pos)
    for pos, name in enumerate(stmt.clustering):
        columns[name] = Column(name, parse_type(defs[name].type), CLUSTERING, pos, not order.get(name, True))
    for cdef in stmt.columns:
        if cdef.name in columns:
            if cdef.static:
                raise InvalidRequest(f"Static column {cdef.name} cannot be part of the PRIMARY KEY")
            continue
        if cdef.static and not stmt.clustering:
            raise InvalidRequest("Static columns are only useful (and thus allowed) if the table has at least "
                                 "one clustering column")
        columns[cdef.name] = Column(cdef.name, parse_type(cdef.type), STATIC if cdef.static else REGULAR)
    for col in columns.values():
        if col.is_primary_key and col.type.name.startswith(("list", "set", "map")):
            raise InvalidRequest(f"Invalid non-frozen collection type for PRIMARY KEY component {col.name}")
    options = dict(TABLE_OPTION_DEFAULTS)
    for key, value in stmt.options.items():
        if key not in TABLE_OPTION_DEFAULTS:
            raise InvalidRequest(f"Unknown property '{key}'")
        options[key] = _option_value(value)
    return Table(keyspace, stmt.table.name, columns, options)


def _option_value(value: Any) -> Any:
    if isinstance(value, list):  # map literal: [((kind, k), (kind, v)), ...]
        return {str(k[1]): str(v[1]) for k, v in value}
    return value


def create_table(catalog: Catalog, stmt: ast.CreateTable, keyspace: str | None) -> tuple[Result, Table | None]:
    ks_name = stmt.table.keyspace or keyspace
    if ks_name is None:
        raise InvalidRequest("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename")
    catalog.keyspace(ks_name)
    table = build_table(ks_name, stmt)
    if catalog.add_table(table, stmt.if_not_exists):
        return SchemaChange("CREATED", "TABLE", ks_name, table.name), table
    return Void(), None


def drop_table(catalog: Catalog, stmt: ast.DropTable, keyspace: str | None) -> tuple[Result, Table | None]:
    ks_name = stmt.table.keyspace or keyspace
    if ks_name is None:
        raise InvalidRequest("No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename")
    dropped = catalog.drop_table(ks_name, stmt.table.name, stmt.if_exists)
    if dropped is None:
        return Void(), None
    return SchemaChange("DROPPED", "TABLE", ks_name, dropped.name), dropped
