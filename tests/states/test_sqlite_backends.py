"""SQLite backends beyond the shared contract: layout, schema checks, pickling, several processes."""

from __future__ import annotations

import multiprocessing
import pickle
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from states import Count, NonTransactionalMap, OpaqueMap
from states.aggregators import combine_updater
from states.errors import InvalidIdentifierError, LeaseLostError, SchemaMismatchError
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from states.sqlite import SqliteBackingMap, SqliteTransactionalStateStore
from states.values import OpaqueValue, TransactionalValue

WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
COUNTER = MapSpec("counter", StateKind.NON_TRANSACTIONAL, (Column("name", "text"),), (Column("n", "bigint"),))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


def test_table_is_plain_typed_rows(db: Path) -> None:
    """An opaque map leaves a table with typed key, txid, value and prev_ columns readable with plain SQL."""
    m = SqliteBackingMap(db, WORDS)
    state = OpaqueMap(m)
    for txid, n in ((1, 3), (2, 4)):
        state.begin_commit(txid)
        state.multi_update([("the",)], [combine_updater(Count(), n)])
        state.commit(txid)
    with closing(sqlite3.connect(db)) as raw, raw:
        assert raw.execute("SELECT word, count, txid, prev_count FROM word_counts WHERE word = 'the'").fetchall() == [
            ("the", 7, 2, 3)]
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        types = {r[1]: r[2].lower() for r in raw.execute("PRAGMA table_info(word_counts)")}
    assert types == {"word": "text", "txid": "bigint", "count": "bigint", "prev_count": "bigint"}
    m.close()


def test_all_column_types_round_trip(db: Path) -> None:
    """boolean, double, blob, int and timestamp columns (aware datetimes included) round-trip."""
    spec = MapSpec("typed", StateKind.OPAQUE, (Column("flag", "boolean"), Column("n", "int")),
                   (Column("x", "double"), Column("raw", "blob"), Column("at", "timestamp")))
    m = SqliteBackingMap(db, spec)
    at = datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    v = OpaqueValue(5, (0.1, b"\x00\xff", at), (2.0, b"", datetime(2024, 1, 1)))
    assert m.multi_cas([(True, -1)], [None], [v])[0].applied
    assert m.multi_get([(True, -1), (False, -1)]) == [v, None]
    assert m.multi_cas([(True, -1)], [v], [v])[0].applied  # the stored row compares equal to the value
    m.close()


def test_schema_mismatch_names_table_column_and_types(db: Path) -> None:
    """An existing table with another type or a missing column is a SchemaMismatchError, never altered."""
    with closing(sqlite3.connect(db)) as raw, raw:
        raw.execute("CREATE TABLE word_counts (word text PRIMARY KEY, count text, txid bigint, prev_count bigint)")
    with pytest.raises(SchemaMismatchError, match=r"'word_counts' column 'count' has type text, expected bigint"):
        SqliteBackingMap(db, WORDS)
    other = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("total", "bigint"),))
    with pytest.raises(SchemaMismatchError, match=r"'word_counts' has no column 'total' \(expected type bigint\)"):
        SqliteBackingMap(db, other)
    with closing(sqlite3.connect(db)) as raw, raw:
        assert [r[1] for r in raw.execute("PRAGMA table_info(word_counts)")] == ["word", "count", "txid", "prev_count"]


def test_primary_key_mismatch_is_refused(db: Path) -> None:
    """A table keyed differently from the spec is refused."""
    with closing(sqlite3.connect(db)) as raw, raw:
        raw.execute("CREATE TABLE word_counts (word text, count bigint, txid bigint, prev_count bigint)")
    with pytest.raises(SchemaMismatchError, match="primary key"):
        SqliteBackingMap(db, WORDS)


def test_bad_identifiers_are_rejected(db: Path) -> None:
    """Table names that are not plain identifiers never reach SQL."""
    with pytest.raises(InvalidIdentifierError):
        SqliteTransactionalStateStore(db, "t", table="x; DROP TABLE y")
    with pytest.raises(InvalidIdentifierError):
        MapSpec('a"b', StateKind.OPAQUE, (Column("k", "text"),), (Column("v", "bigint"),))


def test_keywords_as_column_names_work(db: Path) -> None:
    """A column named like an SQL keyword (group) is quoted, so it works as a plain name."""
    spec = MapSpec("by_group", StateKind.TRANSACTIONAL, (Column("group", "text"),), (Column("sum", "double"),))
    m = SqliteBackingMap(db, spec)
    m.multi_put([("a",)], [TransactionalValue(1, 2.5)])
    assert m.multi_get([("a",)])[0].val == 2.5
    m.close()


def test_pickles_as_path_and_spec(db: Path) -> None:
    """A pickled map (what Spark ships to executors) reopens the same file and holds no connection."""
    m = SqliteBackingMap(db, WORDS)
    m.multi_put([("a",)], [OpaqueValue(1, 1)])
    blob = pickle.dumps(m)
    assert b"sqlite3" not in blob
    clone = pickle.loads(blob)
    assert clone.multi_get([("a",)]) == [OpaqueValue(1, 1)]
    clone.close()
    m.close()


def test_multi_cas_is_one_transaction_and_sees_repeated_keys(db: Path) -> None:
    """One multi_cas is one request; a key repeated in the call is compared with the earlier write."""
    metrics = StateMetrics(CollectorRegistry())
    m = SqliteBackingMap(db, COUNTER, metrics=metrics)
    results = m.multi_cas([("a",), ("a",), ("a",)], [None, 1, 1], [1, 2, 3])
    assert [r.applied for r in results] == [True, True, False]
    assert results[2].current == 2
    assert metrics.value("trident_state_requests_total", backend="sqlite", kind="cas") == 1
    m.close()


def _increment(blob: bytes, times: int) -> None:
    backing = pickle.loads(blob)
    state = NonTransactionalMap(backing, max_cas_attempts=10_000)
    for _ in range(times):
        state.multi_update([("hits",)], [lambda v: (v or 0) + 1])
    backing.close()


def test_processes_compare_and_set_without_losing_updates(db: Path) -> None:
    """Four processes incrementing one key through compare-and-set lose no increment (BEGIN IMMEDIATE).

    The processes are spawned, not forked: a fork of a test worker copies locks its other threads hold
    (a client's, a metrics server's), and a child that waits on one of them never starts.
    """
    m = SqliteBackingMap(db, COUNTER)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_increment, args=(pickle.dumps(m), 50)) for _ in range(4)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
    finally:
        for p in procs:
            p.kill()
    assert m.multi_get([("hits",)]) == [200]
    m.close()


def test_store_fences_a_zombie_in_another_instance(db: Path) -> None:
    """A store instance holding an old epoch cannot write after another instance took the lease over."""
    now = [0.0]
    a = SqliteTransactionalStateStore(db, "topo", clock=lambda: now[0])
    b = SqliteTransactionalStateStore(db, "topo", clock=lambda: now[0])
    e1 = a.acquire_lease("a", 10)
    now[0] = 11
    e2 = b.acquire_lease("b", 10)
    with pytest.raises(LeaseLostError) as err:
        a.put("commit/1", {"txid": 1}, epoch=e1)
    assert (err.value.epoch, err.value.current_epoch) == (e1, e2)
    assert b.get("commit/1") is None
    assert b.keys("") == []
    a.close()
    b.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(max_size=8), st.integers(-2**63, 2**63 - 1)), min_size=1, max_size=6, unique=True),
       st.integers(1, 2**62), st.one_of(st.none(), st.floats(allow_nan=False)), st.text(), st.booleans())
def test_stored_values_round_trip_and_compare_equal(tmp_path: Path, keys: list, txid: int, total: float | None,
                                                    label: str, flag: bool) -> None:
    """Any key and value round-trips, and the row read back is what a compare-and-set expects."""
    spec = MapSpec("prop", StateKind.OPAQUE, (Column("word", "text"), Column("n", "bigint")),
                   (Column("total", "double"), Column("label", "text"), Column("flag", "boolean")))
    m = SqliteBackingMap(tmp_path / f"p{txid}.db", spec)
    value = OpaqueValue(txid, (total, label, flag), None)
    m.multi_put(keys, [value] * len(keys))
    assert m.multi_get(keys) == [value] * len(keys)
    assert all(r.applied for r in m.multi_cas(keys, [value] * len(keys), [OpaqueValue(txid + 1, None, value.curr)]
                                              * len(keys)))
    m.close()


def test_a_state_file_in_a_missing_folder_is_created(tmp_path: Path) -> None:
    """A fresh data volume has no folders yet: the backend creates the file's parent, not its caller."""
    path = tmp_path / "not" / "yet" / "state.db"
    store = SqliteTransactionalStateStore(path, "wc")
    store.put("k", {"v": 1}, epoch=store.acquire_lease("a", 30))
    assert store.get("k") == {"v": 1}
    assert path.exists()
