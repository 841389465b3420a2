"""The largest partition of a sharded table: the figures computed from what the server answers (unit tests on
recorded rows), then on a real Cassandra with a known number of rows per shard, counted and, after a flush
through the server's nodetool, sized."""

from __future__ import annotations

import os
import subprocess
import zlib
from collections import Counter
from typing import Any

import pytest
from cassandra import InvalidRequest, OperationTimedOut
from cassandra.cluster import NoHostAvailable
from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType
from prometheus_client import CollectorRegistry

from states.cassandra import CassandraBackingMap
from states.cassandra.partition_size import (
    MIB,
    ShardCounts,
    ShardedTable,
    count_rows,
    largest_bytes,
    mebibytes_of,
    server_largest_bytes,
)
from states.cassandra.session import shared_client
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests import realstack
from tests.peers import REAL_CASSANDRA, missing_peer
from tests.states.backends import cassandra_settings

WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


# -- figures from the server's answers ---------------------------------------------------------------


def test_largest_bytes_is_the_largest_node_answer_in_bytes() -> None:
    """Each node reports whole mebibytes; the metric is the largest, in bytes; a node without a row is ignored."""
    assert largest_bytes([3, None, 7, 5]) == 7 * MIB
    assert largest_bytes([0]) == 0


def test_largest_bytes_is_unknown_when_no_node_reported() -> None:
    """No SSTable yet on any node (or no such virtual table): unknown, never 0."""
    assert largest_bytes([]) is None
    assert largest_bytes([None, None]) is None


@pytest.mark.parametrize("column", ["mebibytes", "megabytes"])
def test_the_size_column_is_read_whatever_the_server_names_it(column: str) -> None:
    """Cassandra 5.0 calls the column ``mebibytes``; the value is read beside the two name columns."""
    assert mebibytes_of({"keyspace_name": "ks", "table_name": "t", column: 42}) == 42


def test_an_unexpected_row_is_refused() -> None:
    with pytest.raises(ValueError, match="unexpected row"):
        mebibytes_of({"keyspace_name": "ks", "table_name": "t", "a": 1, "b": 2})


def test_a_table_with_a_partition_per_key_is_not_watched() -> None:
    with pytest.raises(ValueError, match="partition per key"):
        ShardedTable("ks", "t", 0)


class _Result:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def one(self) -> Any:
        return self.rows[0]

    def __iter__(self) -> Any:
        return iter(self.rows)


class _Session:
    """Answers COUNT(*) per shard from ``rows`` and max_partition_size per host from ``mib``."""

    def __init__(self, rows: dict[int, int], mib: dict[str, Any]) -> None:
        self.rows, self.mib = rows, mib
        self.counted: list[int] = []

    def execute(self, query: Any, values: Any, *, timeout: float | None = None, host: Any = None) -> _Result:
        if host is not None:
            answer = self.mib[host.address]
            if isinstance(answer, Exception):
                raise answer
            return _Result(answer)
        self.counted.append(values[0])
        return _Result([{"n": self.rows[values[0]]}])


class _Host:
    def __init__(self, address: str, *, up: bool = True) -> None:
        self.address, self.is_up = address, up


class _Client:
    def __init__(self, session: _Session, hosts: list[_Host]) -> None:
        self.session = session
        self.cluster = type("C", (), {"metadata": type("M", (), {"all_hosts": staticmethod(lambda: hosts)})()})()

    def prepare(self, cql: str, *, idempotent: bool) -> str:
        return cql


def test_shards_are_counted_one_per_refresh_in_turn() -> None:
    """Shard 0, 1, 2, then 0 again; the largest is the largest latest count (a shard that shrank is updated)."""
    session = _Session({0: 10, 1: 30, 2: 20}, {})
    counts = ShardCounts(ShardedTable("ks", "t", 3))
    client: Any = _Client(session, [])
    assert counts.largest is None
    assert [counts.count_next(client) for _ in range(4)] == [0, 1, 2, 0]
    assert session.counted == [0, 1, 2, 0]
    assert counts.largest == 30
    session.rows[1] = 5
    counts.count_next(client)
    assert counts.largest == 20


def test_every_node_that_is_up_is_asked() -> None:
    """A virtual table answers for its own node: the largest partition is the largest over the nodes up."""
    session = _Session({}, {"10.0.0.1": [{"keyspace_name": "ks", "table_name": "t", "mebibytes": 2}],
                            "10.0.0.2": [{"keyspace_name": "ks", "table_name": "t", "mebibytes": 9}],
                            "10.0.0.3": []})
    hosts = [_Host("10.0.0.1"), _Host("10.0.0.2"), _Host("10.0.0.3"), _Host("10.0.0.4", up=False)]
    client: Any = _Client(session, hosts)
    assert server_largest_bytes(client, ShardedTable("ks", "t", 4)) == 9 * MIB


def test_a_node_that_does_not_answer_is_passed_over() -> None:
    """A node of another data centre (no connection) or one timing out leaves the others' answers standing."""
    session = _Session({}, {"10.0.0.1": NoHostAvailable("no connection", {}),
                            "10.0.0.2": [{"keyspace_name": "ks", "table_name": "t", "mebibytes": 4}],
                            "10.0.0.3": OperationTimedOut("timed out")})
    hosts = [_Host("10.0.0.1"), _Host("10.0.0.2"), _Host("10.0.0.3")]
    client: Any = _Client(session, hosts)
    assert server_largest_bytes(client, ShardedTable("ks", "t", 4)) == 4 * MIB
    session.mib["10.0.0.2"] = InvalidRequest("no such table")  # a server before 4.0
    assert server_largest_bytes(client, ShardedTable("ks", "t", 4)) is None


# -- a real Cassandra ----------------------------------------------------------------------------------------

SHARDS = 2
ROWS = 120_000  # about 60,000 a shard: a few MiB, so the server's whole-MiB figure is not 0


def _filled_table(request: pytest.FixtureRequest) -> tuple[Any, ShardedTable, Counter[int]]:
    """A sharded word-count table created by the backing map, ROWS words written; the rows per shard by CRC-32."""
    settings = cassandra_settings(request, "real", shards=SHARDS)
    CassandraBackingMap(settings, WORDS, metrics=StateMetrics(CollectorRegistry()))  # creates the table as the service does
    client = shared_client(settings)
    table = ShardedTable(settings.keyspace, WORDS.table, SHARDS)
    words = [f"word{i:07d}" for i in range(ROWS)]
    truth = Counter(zlib.crc32(w.encode()) % SHARDS for w in words)
    insert = client.session.prepare(f"INSERT INTO {table.name} (shard, word, txid, count, prev_count) "
                                    "VALUES (?, ?, 1, 1, 0)")
    batches = []
    for shard in range(SHARDS):  # unlogged batches of one partition each: the fastest plain load
        of_shard = [w for w in words if zlib.crc32(w.encode()) % SHARDS == shard]
        for i in range(0, len(of_shard), 500):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for w in of_shard[i:i + 500]:
                batch.add(insert, (shard, w))
            batches.append((batch, ()))
    execute_concurrent(client.session, batches, concurrency=8, raise_on_first_error=True)
    return client, table, truth


@pytest.mark.timeout(300)
def test_rows_of_each_shard_are_counted_on_a_real_cassandra(request: pytest.FixtureRequest) -> None:
    """COUNT(*) of each shard equals the words written into it (no flush needed: memtables are read too)."""
    client, table, truth = _filled_table(request)
    counts = ShardCounts(table)
    for _ in range(SHARDS):
        counts.count_next(client)
    assert counts.counted == dict(truth)
    assert counts.largest == max(truth.values())
    assert count_rows(client, table, SHARDS + 1) == 0  # a shard number no key has


def _nodetool(*args: str) -> None:
    """``nodetool ARGS`` on every node of the realstack this run's Cassandra came from, or skip saying why."""
    home, data = realstack.find(), os.environ.get("REALSTACK_DATA")
    if home is None or not data:
        missing_peer(REAL_CASSANDRA, "nodetool: no realstack folder (REALSTACK_DIR) or REALSTACK_DATA for the "
                                     "Cassandra named by CASSANDRA_CONTACT_POINTS")
    nodes = len(os.environ.get("REALSTACK_CASSANDRA_NODES", "x").split())
    for node in range(1, nodes + 1):
        subprocess.run([str(home / "node.sh"), "nodetool", str(node), *args], check=True, timeout=120,
                       capture_output=True)


@pytest.mark.timeout(300)
def test_the_largest_partition_in_bytes_after_a_flush_on_a_real_cassandra(request: pytest.FixtureRequest) -> None:
    """After a flush and a compaction (one SSTable), the server's figure is the partition of about 60,000 word-count
    rows: 40-50 bytes a row as measured (docs/configuration.md, "Sizing shards"), so 2 to 4 MiB."""
    client, table, truth = _filled_table(request)
    _nodetool("flush", table.keyspace)
    _nodetool("compact", table.keyspace, table.table)
    size = server_largest_bytes(client, table)
    assert size is not None
    rows = max(truth.values())
    assert 2 * MIB <= size <= 4 * MIB, (size, rows)
    assert 30 <= size / rows <= 70  # bytes a row, at the server's whole-MiB resolution
