"""How large the largest partition of a sharded state table is, read over CQL only (no JMX).

A sharded table (``cassandra.shards: N``, :mod:`states.cassandra.shards`) keeps every key in one of N
partitions, so a partition grows with the key space; Cassandra's guidance is to keep one under about
100 MB (``partition_size_warn_threshold``). Two readings, chosen from what was measured on Cassandra 5.0
(``docs/operations.md``, "TridentPartitionLarge"):

* **bytes**: the server's own figure, ``system_views.max_partition_size`` (a virtual table of Cassandra 4.0 and
  later, column ``mebibytes`` in 4.0.14 and 5.0; one row per table *per node*, so every node is asked and the
  largest answer kept). It is the largest partition of the node's SSTables, uncompressed, in whole
  mebibytes: rows still in memtables are not in it until a flush, and a partition spread over several
  SSTables counts its largest piece until compaction merges them. Cheap (a read of in-memory metrics).
* **rows**: ``SELECT COUNT(*) ... WHERE shard = ?``, exact and fresh, but it reads every row of the
  partition (100,000 rows took 0.3-2.2 s on a loaded single node), so one shard is counted per refresh in
  turn (:class:`ShardCounts`); shards are equal in size (CRC-32 of the key), so any one is representative.

``system.size_estimates`` / ``system.table_estimates`` are not used: their partition counts are index
sampling estimates (1 or 256 for a table of 4 partitions) and their mean size is per SSTable piece.
A table with a partition per key (``shards: 0``) has nothing to watch: each partition is one key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cassandra import InvalidRequest, OperationTimedOut
from cassandra.cluster import NoHostAvailable

from states.cassandra.schema import check_cql_identifier
from states.cassandra.session import CassandraClient
from states.cassandra.shards import SHARD_COLUMN, check_shards

MIB = 1 << 20
COUNT_TIMEOUT_S = 120.0  # one shard's COUNT(*) reads every row of its partition: far longer than a key's read
_NAME_COLUMNS = frozenset({"keyspace_name", "table_name"})


@dataclass(frozen=True, slots=True)
class ShardedTable:
    """A state table laid out in ``shards`` partitions (``shards`` > 0)."""

    keyspace: str
    table: str
    shards: int

    def __post_init__(self) -> None:
        check_cql_identifier(self.keyspace, "keyspace name")
        check_cql_identifier(self.table, "table name")
        if check_shards(self.shards) == 0:
            msg = f"table {self.keyspace}.{self.table} has a partition per key (shards: 0): nothing to watch"
            raise ValueError(msg)

    @property
    def name(self) -> str:
        return f"{self.keyspace}.{self.table}"


def largest_bytes(mebibytes_by_node: Iterable[int | None]) -> int | None:
    """The largest partition in bytes from each node's ``max_partition_size`` (None where a node had no row);
    None when no node reported one (no SSTable yet, or a server without the virtual table)."""
    known = [m for m in mebibytes_by_node if m is not None]
    return max(known) * MIB if known else None


def mebibytes_of(row: Mapping[str, Any]) -> int:
    """The size column of a ``system_views.max_partition_size`` row, whatever the server calls it (5.0:
    ``mebibytes``); the row's other columns are the keyspace's and table's names."""
    values = [v for k, v in row.items() if k not in _NAME_COLUMNS]
    if len(values) != 1 or not isinstance(values[0], int):
        msg = f"unexpected row of system_views.max_partition_size: {dict(row)!r}"
        raise ValueError(msg)
    return values[0]


def server_largest_bytes(client: CassandraClient, table: ShardedTable) -> int | None:
    """Ask every node that is up for ``table``'s largest partition (:func:`largest_bytes` of the answers).

    A virtual table answers for the node that runs the query, so each node is addressed itself; a node that
    does not answer (or that the session keeps no connection to: another data centre's) or has no such table
    (Cassandra before 4.0) counts as no row: a partition's replicas on the nodes that answer still report it."""
    query = "SELECT * FROM system_views.max_partition_size WHERE keyspace_name = %s AND table_name = %s"
    answers: list[int | None] = []
    for host in client.cluster.metadata.all_hosts():
        if not host.is_up:
            continue
        try:
            rows = list(client.session.execute(query, (table.keyspace, table.table), host=host))
        except (InvalidRequest, NoHostAvailable, OperationTimedOut):
            answers.append(None)  # no such virtual table there, or that node did not answer
            continue
        answers.extend(mebibytes_of(r) for r in rows)
    return largest_bytes(answers)


def count_rows(client: CassandraClient, table: ShardedTable, shard: int) -> int:
    """The rows of one shard's partition, counted by the server (reads them all: see the module's docstring)."""
    stmt = client.prepare(f"SELECT COUNT(*) AS n FROM {table.name} WHERE {SHARD_COLUMN} = ?", idempotent=True)
    row = client.session.execute(stmt, (shard,), timeout=COUNT_TIMEOUT_S).one()
    return int(row["n"] if isinstance(row, Mapping) else row[0])


@dataclass(slots=True)
class ShardCounts:
    """Row counts of one table's shards, one shard counted per :meth:`count_next` in turn (0, 1, ..., N-1, 0, ...).

    :attr:`largest` is the largest count seen, each shard's latest count kept: with equal shards the first
    count already tells the size, and every shard has been counted after N refreshes."""

    table: ShardedTable
    counted: dict[int, int] = field(default_factory=dict)
    _next: int = 0

    def count_next(self, client: CassandraClient) -> int:
        """Count the next shard; its number."""
        shard = self._next
        self.counted[shard] = count_rows(client, self.table, shard)
        self._next = (shard + 1) % self.table.shards
        return shard

    @property
    def largest(self) -> int | None:
        """The largest latest count (None before the first)."""
        return max(self.counted.values()) if self.counted else None
