"""The system tables the DataStax driver reads at connect and on schema refresh.

system.local / peers / peers_v2 describe one node (Murmur3 tokens, data
center, release version, schema version); system_schema.* is generated from the
catalog on every read, so driver metadata always matches DDL issued so far.
Column sets follow Cassandra 4.1.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .ddl import TABLE_OPTION_DEFAULTS
from .schema import CLUSTERING, PARTITION_KEY, REGULAR, Catalog, Column, Keyspace, Table
from .types import parse_type

SYSTEM_KEYSPACES = ("system", "system_schema", "system_auth", "system_distributed", "system_traces",
                    "system_virtual_schema", "system_views")


@dataclass
class NodeInfo:
    """Identity of the single fake node, as reported in system.local."""

    host: str = "127.0.0.1"
    port: int = 9042
    data_center: str = "datacenter1"
    rack: str = "rack1"
    cluster_name: str = "Test Cluster"
    release_version: str = "4.1.5"
    cql_version: str = "3.4.6"
    native_protocol_version: str = "5"
    host_id: uuid.UUID = field(default_factory=uuid.uuid4)
    num_tokens: int = 8

    def tokens(self) -> frozenset[str]:
        step = (1 << 64) // self.num_tokens
        return frozenset(str(-(1 << 63) + i * step + step // 2) for i in range(self.num_tokens))


def _table(keyspace: str, name: str, pk: list[str], ck: list[str], cols: dict[str, str],
           provider: Callable[[], Iterable[dict[str, Any]]]) -> Table:
    columns: dict[str, Column] = {}
    for name_, type_text in cols.items():
        t = parse_type(type_text)
        if name_ in pk:
            columns[name_] = Column(name_, t, PARTITION_KEY, pk.index(name_))
        elif name_ in ck:
            columns[name_] = Column(name_, t, CLUSTERING, ck.index(name_))
        else:
            columns[name_] = Column(name_, t, REGULAR)
    table_id = uuid.uuid5(uuid.NAMESPACE_OID, f"{keyspace}.{name}")
    return Table(keyspace, name, columns, dict(TABLE_OPTION_DEFAULTS), table_id, provider)


_MAP = "frozen<map<text, text>>"
_LIST = "frozen<list<text>>"
_COLUMNS_LAYOUT = {"keyspace_name": "text", "table_name": "text", "column_name": "text",
                   "clustering_order": "text", "column_name_bytes": "blob", "kind": "text",
                   "position": "int", "type": "text"}


def install(catalog: Catalog, node: NodeInfo) -> None:
    """Register system keyspaces and tables (row providers read `catalog`/`node` live)."""

    def user_and_system_keyspaces() -> list[Keyspace]:
        return [ks for ks in catalog.keyspaces.values() if ks.name != "system_virtual_schema"]

    def all_tables() -> Iterable[Table]:
        for ks in user_and_system_keyspaces():
            yield from ks.tables.values()

    def local() -> Iterable[dict[str, Any]]:
        yield {"key": "local", "bootstrapped": "COMPLETED", "broadcast_address": node.host,
               "broadcast_port": 7000, "cluster_name": node.cluster_name, "cql_version": node.cql_version,
               "data_center": node.data_center, "gossip_generation": 1, "host_id": node.host_id,
               "listen_address": node.host, "listen_port": 7000,
               "native_protocol_version": node.native_protocol_version,
               "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner", "rack": node.rack,
               "release_version": node.release_version, "rpc_address": node.host, "rpc_port": node.port,
               "schema_version": catalog.version, "tokens": node.tokens(), "truncated_at": None}

    def keyspaces() -> Iterable[dict[str, Any]]:
        for ks in user_and_system_keyspaces():
            yield {"keyspace_name": ks.name, "durable_writes": ks.durable_writes, "replication": ks.replication}

    def tables() -> Iterable[dict[str, Any]]:
        for t in all_tables():
            row = {"keyspace_name": t.keyspace, "table_name": t.name, "flags": frozenset({"compound"}),
                   "id": t.id}
            row.update(t.options)
            yield row

    def columns() -> Iterable[dict[str, Any]]:
        for t in all_tables():
            for col in t.columns.values():
                yield _column_row(t, col)

    def nothing() -> Iterable[dict[str, Any]]:
        return ()

    table_columns = {"keyspace_name": "text", "table_name": "text", "additional_write_policy": "text",
                     "bloom_filter_fp_chance": "double", "caching": _MAP, "cdc": "boolean", "comment": "text",
                     "compaction": _MAP, "compression": _MAP, "crc_check_chance": "double",
                     "default_time_to_live": "int", "extensions": "frozen<map<text, blob>>",
                     "flags": "frozen<set<text>>", "gc_grace_seconds": "int", "id": "uuid",
                     "max_index_interval": "int", "memtable_flush_period_in_ms": "int",
                     "min_index_interval": "int", "read_repair": "text", "speculative_retry": "text"}
    peer_common = {"data_center": "text", "host_id": "uuid", "preferred_ip": "inet", "rack": "text",
                   "release_version": "text", "schema_version": "uuid", "tokens": "set<text>"}
    definitions = [
        _table("system", "local", ["key"], [], {
            "key": "text", "bootstrapped": "text", "broadcast_address": "inet", "broadcast_port": "int",
            "cluster_name": "text", "cql_version": "text", "data_center": "text", "gossip_generation": "int",
            "host_id": "uuid", "listen_address": "inet", "listen_port": "int",
            "native_protocol_version": "text", "partitioner": "text", "rack": "text",
            "release_version": "text", "rpc_address": "inet", "rpc_port": "int", "schema_version": "uuid",
            "tokens": "set<text>", "truncated_at": "map<uuid, blob>"}, local),
        _table("system", "peers", ["peer"], [], {"peer": "inet", "rpc_address": "inet", **peer_common}, nothing),
        _table("system", "peers_v2", ["peer"], ["peer_port"], {
            "peer": "inet", "peer_port": "int", "native_address": "inet", "native_port": "int",
            "preferred_port": "int", **peer_common}, nothing),
        _table("system_schema", "keyspaces", ["keyspace_name"], [], {
            "keyspace_name": "text", "durable_writes": "boolean", "replication": _MAP}, keyspaces),
        _table("system_schema", "tables", ["keyspace_name"], ["table_name"], table_columns, tables),
        _table("system_schema", "columns", ["keyspace_name"], ["table_name", "column_name"], _COLUMNS_LAYOUT,
               columns),
        _table("system_schema", "dropped_columns", ["keyspace_name"], ["table_name", "column_name"], {
            "keyspace_name": "text", "table_name": "text", "column_name": "text", "dropped_time": "timestamp",
            "kind": "text", "type": "text"}, nothing),
        _table("system_schema", "triggers", ["keyspace_name"], ["table_name", "trigger_name"], {
            "keyspace_name": "text", "table_name": "text", "trigger_name": "text", "options": _MAP}, nothing),
        _table("system_schema", "views", ["keyspace_name"], ["view_name"], {
            "keyspace_name": "text", "view_name": "text", "base_table_id": "uuid", "base_table_name": "text",
            "id": "uuid", "include_all_columns": "boolean", "where_clause": "text"}, nothing),
        _table("system_schema", "types", ["keyspace_name"], ["type_name"], {
            "keyspace_name": "text", "type_name": "text", "field_names": _LIST, "field_types": _LIST}, nothing),
        _table("system_schema", "functions", ["keyspace_name"], ["function_name", "argument_types"], {
            "keyspace_name": "text", "function_name": "text", "argument_types": _LIST,
            "argument_names": _LIST, "body": "text", "called_on_null_input": "boolean", "language": "text",
            "return_type": "text"}, nothing),
        _table("system_schema", "aggregates", ["keyspace_name"], ["aggregate_name", "argument_types"], {
            "keyspace_name": "text", "aggregate_name": "text", "argument_types": _LIST, "final_func": "text",
            "initcond": "text", "return_type": "text", "state_func": "text", "state_type": "text"}, nothing),
        _table("system_schema", "indexes", ["keyspace_name"], ["table_name", "index_name"], {
            "keyspace_name": "text", "table_name": "text", "index_name": "text", "kind": "text",
            "options": _MAP}, nothing),
        _table("system_virtual_schema", "keyspaces", ["keyspace_name"], [], {"keyspace_name": "text"}, nothing),
        _table("system_virtual_schema", "tables", ["keyspace_name"], ["table_name"], {
            "keyspace_name": "text", "table_name": "text", "comment": "text"}, nothing),
        _table("system_virtual_schema", "columns", ["keyspace_name"], ["table_name", "column_name"],
               _COLUMNS_LAYOUT, nothing),
    ]
    local_strategy = {"class": "org.apache.cassandra.locator.LocalStrategy"}

    def simple(rf: int) -> dict[str, str]:
        return {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": str(rf)}

    replication = {"system": local_strategy, "system_schema": local_strategy, "system_auth": simple(1),
                   "system_distributed": simple(3), "system_traces": simple(2),
                   "system_virtual_schema": local_strategy}
    for name, repl in replication.items():
        catalog.keyspaces[name] = Keyspace(name, dict(repl), True, system=True)
    for table in definitions:
        catalog.keyspaces[table.keyspace].tables[table.name] = table


def _column_row(table: Table, col: Column) -> dict[str, Any]:
    order = ("desc" if col.descending else "asc") if col.kind == CLUSTERING else "none"
    return {"keyspace_name": table.keyspace, "table_name": table.name, "column_name": col.name,
            "clustering_order": order, "column_name_bytes": col.name.encode("utf-8"), "kind": col.kind,
            "position": col.position if col.kind in (PARTITION_KEY, CLUSTERING) else -1,
            "type": col.type.name}


def is_system_keyspace(name: str | None) -> bool:
    return name in SYSTEM_KEYSPACES


