"""Cassandra tables from a MapSpec: created if absent, validated if present, never altered.

Every identifier that reaches CQL text is checked first (:func:`check_cql_identifier`): the
project's rule (lower-case, ``[a-z][a-z0-9_]*``) plus CQL's reserved keywords, so names are used
unquoted and read in cqlsh exactly as written (``SELECT word, count FROM ks.word_counts``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from states.cassandra.key_index import ensure_key_index
from states.cassandra.session import BACKEND, CassandraClient
from states.cassandra.shards import DEFAULT_SHARDS, SHARD_COLUMN, SHARD_TYPE
from states.errors import InvalidIdentifierError, SchemaMismatchError, StateTableMissingError
from states.layout import RowLayout
from states.metrics import StateMetrics
from states.spec import check_identifier

# Cassandra's reserved keywords (cannot be unquoted identifiers); see the CQL reference, appendix A.
CQL_RESERVED = frozenset("""
add allow alter and apply asc authorize batch begin by columnfamily create default delete desc describe drop
entries execute from full grant if in index infinity insert into is keyspace limit materialized mbean mbeans
modify nan norecursive not null of on or order primary rename replace revoke schema select set table to token
truncate unlogged unset update use using view where with
""".split())  # noqa: SIM905  the keywords as the CQL reference prints them
SHARDS_COMMENT = "state table: keys in {} shards by crc32 (cassandra.shards)"
# A table whose rows expire (ttl_s): every cell carries a TTL and nothing is ever deleted, so an expired cell needs
# no grace beyond the hint window (3 h by default: a hint outliving the grace would be dropped) before a compaction
# may purge it; single-SSTable tombstone compactions run on SSTables from that age. Until purged, expired cells are
# tombstones that a full scan reads (tombstone_failure_threshold: 100,000 fails it); see docs/configuration.md.
EXPIRING_GC_GRACE_S = 10_800
EXPIRING_OPTIONS = (f"gc_grace_seconds = {EXPIRING_GC_GRACE_S} AND compaction = {{'class': "
                    f"'SizeTieredCompactionStrategy', 'unchecked_tombstone_compaction': 'true', "
                    f"'tombstone_compaction_interval': '{EXPIRING_GC_GRACE_S}'}}")
_SHARDS_IN_COMMENT = re.compile(r"keys in (\d+) shards")
_REPLICATION_VALUE = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


def check_cql_identifier(name: str, what: str = "identifier") -> str:
    """``name`` if safe as an unquoted CQL identifier, else InvalidIdentifierError."""
    check_identifier(name, what)
    if name in CQL_RESERVED:
        msg = f"invalid {what} {name!r}: it is a reserved CQL keyword"
        raise InvalidIdentifierError(msg)
    return name


@dataclass(frozen=True, slots=True)
class TableShape:
    """What a table must look like: typed columns, partition key, clustering and static columns."""

    keyspace: str
    table: str
    columns: tuple[tuple[str, str], ...]
    partition_key: tuple[str, ...]
    clustering: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    shards: int = 0  # > 0: keyed by ``shard`` first (states.cassandra.shards), the count kept in the table's comment
    expiring: bool = False  # rows expire (ttl_s): created with EXPIRING_OPTIONS, so expired rows are purged in hours

    @staticmethod
    def of(keyspace: str, layout: RowLayout, shards: int = 0) -> TableShape:
        """The table of ``layout``: keyed by its key columns, or with ``shards`` by ``shard`` then the key."""
        for name, _ in layout.columns:
            if name != "txid" and not name.startswith("prev_"):
                check_cql_identifier(name, "column name")
        keyspace, table = check_cql_identifier(keyspace, "keyspace name"), check_cql_identifier(layout.spec.table,
                                                                                                "table name")
        key = tuple(n for n, _ in layout.key_columns)
        expiring = layout.spec.ttl_s is not None
        if not shards:
            return TableShape(keyspace, table, layout.columns, key, expiring=expiring)
        if SHARD_COLUMN in dict(layout.columns):
            msg = (f"table {table}: column name {SHARD_COLUMN!r} is the shard column of a sharded table "
                   f"(cassandra.shards: {shards}); rename the column or set shards: 0")
            raise InvalidIdentifierError(msg)
        return TableShape(keyspace, table, ((SHARD_COLUMN, SHARD_TYPE), *layout.columns), (SHARD_COLUMN,), key,
                          shards=shards, expiring=expiring)

    @property
    def key_columns(self) -> tuple[str, ...]:
        """The primary key's columns, partition key first."""
        return self.partition_key + self.clustering

    @property
    def name(self) -> str:
        return f"{self.keyspace}.{self.table}"

    def create_cql(self) -> str:
        cols = ", ".join(f"{n} {t}{' static' if n in self.static else ''}" for n, t in self.columns)
        key = f"({', '.join(self.partition_key)})" + "".join(f", {c}" for c in self.clustering)
        options = ([f"comment = '{SHARDS_COMMENT.format(self.shards)}'"] if self.shards else []) + (
            [EXPIRING_OPTIONS] if self.expiring else [])
        with_ = f" WITH {' AND '.join(options)}" if options else ""
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({cols}, PRIMARY KEY ({key})){with_}"


def replication_cql(replication: Sequence[tuple[str, str]]) -> str:
    for k, v in replication:
        if not (_REPLICATION_VALUE.match(k) and _REPLICATION_VALUE.match(v)):
            msg = f"invalid replication option {k!r}: {v!r}"
            raise InvalidIdentifierError(msg)
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in replication) + "}"


def ensure_table(client: CassandraClient, shape: TableShape, metrics: StateMetrics, *, create: bool = True,
                 committed_txid: int = 0) -> None:
    """Create the keyspace (if the settings say so) and table if absent (``create``), then validate the table.

    A sharded table is created with an index on its key columns where the server has one
    (:mod:`states.cassandra.key_index`). Without ``create`` (txids were committed into the table: ``committed_txid``) a missing table is
    :class:`StateTableMissingError`, never created again empty. Done once per session and table: a
    backing map built per Spark task costs no DDL round trips.
    """
    if shape in client.validated_tables:
        return
    s = client.settings
    if create:
        if s.create_keyspace:
            _ddl(client, f"CREATE KEYSPACE IF NOT EXISTS {shape.keyspace} WITH replication = "
                         f"{replication_cql(s.replication)}", metrics)
        _ddl(client, shape.create_cql(), metrics)
        if shape.shards:  # plain CQL reads a key without its shard (on Cassandra 5.0: states.cassandra.key_index)
            ensure_key_index(client, shape.keyspace, shape.table, shape.shards, shape.clustering, metrics=metrics)
    validate_table(client, shape, metrics, committed_txid=None if create else committed_txid)
    client.validated_tables.add(shape)


def schema_agreed(client: CassandraClient) -> bool:
    """Whether every reachable node holds the same schema version now: until they do, a node may not know a
    table yet (or still), and an answer about the table is no evidence of its loss."""
    return bool(client.session.cluster.control_connection.wait_for_schema_agreement())


def table_exists(client: CassandraClient, shape: TableShape, metrics: StateMetrics) -> bool:
    """Whether ``shape``'s table exists now (read from the schema tables, not from the driver's cache)."""
    return bool(_columns(client, shape, metrics))


def validate_table(client: CassandraClient, shape: TableShape, metrics: StateMetrics, *,
                   committed_txid: int | None = None) -> None:
    """Raise SchemaMismatchError, naming table, column and both types, if the table differs from ``shape``;
    StateTableMissingError if it is absent where txids were committed into it (``committed_txid`` not None)."""
    found = _columns(client, shape, metrics)
    if not found and committed_txid is not None:
        raise StateTableMissingError(shape.name, committed_txid)
    if not found:
        msg = f"table {shape.name} does not exist (and could not be created)"
        raise SchemaMismatchError(msg)
    _check_shards(client, shape, found, metrics)
    for name, type_ in shape.columns:
        col = found.get(name)
        if col is None:
            msg = (
                f"table {shape.name} has no column {name!r} (expected type {type_}); "
                f"migrate the table or configure another table name"
            )
            raise SchemaMismatchError(msg)
        if _type(col["type"]) != type_:
            msg = f"table {shape.name} column {name!r} has type {col['type']}, expected {type_}"
            raise SchemaMismatchError(msg)
    _check_key(shape, found, "partition_key", shape.partition_key)
    _check_key(shape, found, "clustering", shape.clustering)
    for name in shape.static:
        if found[name]["kind"] != "static":
            msg = f"table {shape.name} column {name!r} is {found[name]['kind']}, expected static"
            raise SchemaMismatchError(msg)


def _check_shards(client: CassandraClient, shape: TableShape, found: dict[str, dict[str, Any]],
                  metrics: StateMetrics) -> None:
    """A table sharded another way than the settings say would have its keys looked for in other partitions:
    refused, naming the count the table was created with."""
    created = _created_shards(client, shape.keyspace, shape.table, found, metrics)
    if created == shape.shards:
        return
    was = f"{created} shards" if created else "a partition per key (shards: 0)"
    msg = (f"table {shape.name} was created with {was}, the settings say cassandra.shards: {shape.shards}; "
           f"a table's layout is fixed when it is created: leave cassandra.shards unset (each table is used as it "
           f"was created), set it back, or configure another table name")
    raise SchemaMismatchError(msg)


def shards_in_use(client: CassandraClient, keyspace: str, table: str, configured: int | None,
                  metrics: StateMetrics) -> int:
    """The shards a state table is used with: ``configured`` (``cassandra.shards``) when set; unset, the count
    the table was created with, or :data:`~states.cassandra.shards.DEFAULT_SHARDS` for a table not created yet.
    Remembered per session once the table exists (a table's layout never changes)."""
    if configured is not None:
        return configured
    known = client.table_shards.get((keyspace, table))
    if known is None:
        created = table_shards(client, keyspace, table, metrics)
        if created is None:
            return DEFAULT_SHARDS
        known = client.table_shards[(keyspace, table)] = created
    return known


def table_shards(client: CassandraClient, keyspace: str, table: str, metrics: StateMetrics) -> int | None:
    """The shards ``keyspace.table`` was created with (0: a partition per key); None when it does not exist."""
    found = _columns(client, TableShape(keyspace, table, (), ()), metrics)
    return _created_shards(client, keyspace, table, found, metrics) if found else None


def _created_shards(client: CassandraClient, keyspace: str, table: str, found: dict[str, dict[str, Any]],
                    metrics: StateMetrics) -> int:
    """The shard count in the table's comment when ``shard`` is its partition key, else 0."""
    if found.get(SHARD_COLUMN, {}).get("kind") != "partition_key":  # certainly not sharded: skip a read
        return 0
    stmt = client.prepare("SELECT comment FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
                          idempotent=True)
    row = client.run_one(stmt, (keyspace, table), kind="schema", metrics=metrics).one()
    match = _SHARDS_IN_COMMENT.search(row["comment"] or "") if row is not None else None
    return int(match.group(1)) if match else 0  # a key column of the user's named shard


def _columns(client: CassandraClient, shape: TableShape, metrics: StateMetrics) -> dict[str, dict[str, Any]]:
    stmt = client.prepare("SELECT column_name, type, kind, position FROM system_schema.columns "
                          "WHERE keyspace_name = ? AND table_name = ?", idempotent=True)
    rows = list(client.run_one(stmt, (shape.keyspace, shape.table), kind="schema", metrics=metrics))
    return {r["column_name"]: r for r in rows}


def _check_key(shape: TableShape, found: dict[str, dict[str, Any]], kind: str, expected: tuple[str, ...]) -> None:
    actual = tuple(r["column_name"] for r in sorted(found.values(), key=lambda r: r["position"]) if r["kind"] == kind)
    if actual != expected:
        msg = (
            f"table {shape.name} has {kind.replace('_', ' ')} columns {list(actual)}, "
            f"expected {list(expected)}"
        )
        raise SchemaMismatchError(msg)


def _type(cql_type: str) -> str:
    return "text" if cql_type == "varchar" else cql_type


def _ddl(client: CassandraClient, cql: str, metrics: StateMetrics) -> None:
    metrics.state_requests.labels(backend=BACKEND, kind="schema").inc()
    client.session.execute(cql, timeout=max(client.settings.request_timeout_s, 30.0))
