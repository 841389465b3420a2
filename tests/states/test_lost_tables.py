"""A state table that vanished after txids were committed into it is a permanent, typed error, never
created again empty; a row the database refuses is typed too. SQLite files and a real Cassandra
(the CQL test server does not drop tables under open statements the way Cassandra does)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from states import Count
from states.aggregators import combine_updater
from states.errors import RowRefusedError, StateTableMissingError
from states.opaque import OpaqueMap
from states.spec import Column, MapSpec, StateKind
from states.sqlite import SqliteBackingMap
from tests.states.backends import cassandra_settings

SPEC = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


def _commit(state: OpaqueMap, txid: int, words: list[str]) -> None:
    state.begin_commit(txid)
    state.multi_update([(w,) for w in words], [combine_updater(Count(), 1) for _ in words])
    state.commit(txid)


def _sqlite_tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def test_sqlite_open_without_create_names_the_table_and_txid_and_creates_nothing(tmp_path: Path) -> None:
    """Opened where txid 7 was committed, a missing SQLite table is StateTableMissingError naming it and
    txid 7; the file gains no table."""
    path = tmp_path / "state.db"
    SqliteBackingMap(path, MapSpec("other", StateKind.OPAQUE, SPEC.key, SPEC.value)).close()  # the file exists
    with pytest.raises(StateTableMissingError) as e:
        SqliteBackingMap(path, SPEC, create=False, committed_txid=7)
    assert (e.value.table, e.value.committed_txid) == ("word_counts", 7)
    assert "word_counts" in str(e.value)
    assert "txid 7" in str(e.value)
    assert "word_counts" not in _sqlite_tables(path)


def test_sqlite_table_dropped_while_open_is_typed_not_recreated(tmp_path: Path) -> None:
    """A table dropped under an open SQLite map: the next read and the next write raise
    StateTableMissingError (not sqlite3's OperationalError), and the table stays gone."""
    path = tmp_path / "state.db"
    backing = SqliteBackingMap(path, SPEC)
    state = OpaqueMap(backing)
    _commit(state, 1, ["a", "b"])
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE word_counts")
    conn.commit()
    conn.close()
    with pytest.raises(StateTableMissingError):
        backing.multi_get([("a",)])
    with pytest.raises(StateTableMissingError):
        _commit(state, 2, ["a"])
    assert "word_counts" not in _sqlite_tables(path)
    backing.close()


@pytest.fixture
def real(request: pytest.FixtureRequest) -> Any:
    return cassandra_settings(request, "real")


def _cassandra_table_exists(client: Any, keyspace: str, table: str) -> bool:
    rows = client.session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s "
                                  "AND table_name = %s", (keyspace, table))
    return bool(list(rows))


@pytest.mark.real_cassandra
def test_cassandra_table_dropped_is_typed_and_never_recreated(real: Any) -> None:
    """Real Cassandra: a table dropped while its map is open makes the next commit raise
    StateTableMissingError (typed from the driver's InvalidRequest by asking the schema, not by its text);
    opening the map again where txids were committed raises it too; the table is not created again."""
    from states.cassandra import CassandraBackingMap
    from states.cassandra.session import shared_client

    backing = CassandraBackingMap(real, SPEC)
    state = OpaqueMap(backing)
    _commit(state, 1, ["a", "b", "a"])
    client = shared_client(real)
    client.session.execute(f"DROP TABLE {real.keyspace}.word_counts", timeout=60)
    with pytest.raises(StateTableMissingError) as e:
        _commit(state, 2, ["a", "c"])
    assert e.value.table == f"{real.keyspace}.word_counts"
    with pytest.raises(StateTableMissingError):
        backing.multi_get([("a",)])
    with pytest.raises(StateTableMissingError) as again:
        CassandraBackingMap(real, SPEC, create=False, committed_txid=1)
    assert again.value.committed_txid == 1
    assert "txid 1" in str(again.value)
    assert not _cassandra_table_exists(client, real.keyspace, "word_counts")


@pytest.mark.real_cassandra
@pytest.mark.parametrize("key", ["", "x" * 65536])
def test_cassandra_refusing_a_row_is_a_typed_permanent_error(real: Any, key: str) -> None:
    """Real Cassandra: a key it refuses for the row (empty, or over 65535 bytes) is RowRefusedError naming
    the table, through the commit path's pipe; the table is there and keeps its other rows. A partition per key:
    a sharded table takes both keys into clustering columns, and the long one then breaks the node's flushes
    (the limits' pre-commit check never sends it: test_key_limits.py)."""
    from states.cassandra import CassandraBackingMap

    real = replace(real, shards=0)
    backing = CassandraBackingMap(real, SPEC)
    state = OpaqueMap(backing)
    _commit(state, 1, ["a"])
    with pytest.raises(RowRefusedError) as e:
        _commit(state, 2, [key])
    assert e.value.table == f"{real.keyspace}.word_counts"
    assert backing.multi_get([("a",)])[0].curr == 1


@pytest.mark.real_cassandra
def test_a_refusal_while_the_nodes_disagree_on_the_schema_stays_transient(real: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Real Cassandra: while the nodes disagree on the schema, an "unconfigured table" refusal is no evidence
    of a lost table (a node may not have it yet): the driver's InvalidRequest comes back as it is, to be retried,
    neither StateTableMissingError nor RowRefusedError; once they agree it is the lost table it is."""
    from cassandra import InvalidRequest

    from states.cassandra import CassandraBackingMap, backing_map
    from states.cassandra.session import shared_client

    backing = CassandraBackingMap(real, SPEC)
    state = OpaqueMap(backing)
    _commit(state, 1, ["a"])
    shared_client(real).session.execute(f"DROP TABLE {real.keyspace}.word_counts", timeout=60)
    monkeypatch.setattr(backing_map, "schema_agreed", lambda client: False)
    with pytest.raises(InvalidRequest):
        backing.multi_get([("a",)])
    monkeypatch.undo()
    with pytest.raises(StateTableMissingError):
        backing.multi_get([("a",)])
