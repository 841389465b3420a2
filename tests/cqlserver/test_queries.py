"""DDL, DML, types, paging, TTL and error responses through the real driver."""

from __future__ import annotations

import datetime  # noqa: ICN001  the module's own name
import decimal
import uuid

import pytest
from cassandra import AlreadyExists, InvalidRequest
from cassandra.protocol import SyntaxException
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType, SimpleStatement


@pytest.fixture(scope="module", autouse=True)
def schema(session):
    session.execute("CREATE TABLE IF NOT EXISTS kv (k text PRIMARY KEY, v bigint)")
    session.execute("CREATE TABLE IF NOT EXISTS events (tenant text, seq int, body text, owner text static, "
                    "PRIMARY KEY (tenant, seq))")
    session.execute("CREATE TABLE IF NOT EXISTS desc_events (p int, c int, v int, PRIMARY KEY (p, c)) "
                    "WITH CLUSTERING ORDER BY (c DESC)")
    session.execute("CREATE TABLE IF NOT EXISTS lit (id uuid PRIMARY KEY, ts timestamp, b blob, f boolean, d double)")


def test_create_existing_table_and_keyspace(session):
    assert list(session.execute("CREATE TABLE IF NOT EXISTS kv (k text PRIMARY KEY, v bigint)")) == []
    with pytest.raises(AlreadyExists) as exc:
        session.execute("CREATE TABLE kv (k text PRIMARY KEY, v bigint)")
    assert (exc.value.keyspace, exc.value.table) == ("ks", "kv")
    with pytest.raises(AlreadyExists):
        session.execute("CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")


def test_all_supported_types_round_trip(session):
    session.execute("CREATE TABLE IF NOT EXISTS typed (id uuid PRIMARY KEY, t text, a ascii, b bigint, i int, "
                    "s smallint, y tinyint, d double, f float, flag boolean, ts timestamp, tu timeuuid, "
                    "bl blob, dec decimal, vi varint)")
    insert = session.prepare("INSERT INTO typed (id, t, a, b, i, s, y, d, f, flag, ts, tu, bl, dec, vi) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
    key, tu = uuid.uuid4(), uuid.uuid1()
    ts = datetime.datetime(2024, 2, 29, 12, 30, 45, 123000)
    values = (key, "naïve ☃", "ascii", -(2 ** 62), -5, 300, -7, 2.5, 0.5, True, ts, tu, b"\x00\x01",
              decimal.Decimal("12.340"), 10 ** 30)
    session.execute(insert, values)
    row = session.execute(SimpleStatement("SELECT * FROM typed WHERE id = %s"), (key,)).one()
    assert (row.id, row.t, row.a, row.b, row.i, row.s, row.y, row.d, row.f, row.flag, row.ts, row.tu, row.bl,
            row.dec, row.vi) == values
    other = uuid.uuid4()
    session.execute(insert, (other,) + (None,) * 14)
    assert all(v is None for v in session.execute("SELECT * FROM typed WHERE id = %s", (other,)).one()[1:])


def test_literals_in_cql_text(session):
    session.execute("INSERT INTO lit (id, ts, b, f, d) VALUES (6ba7b810-9dad-11d1-80b4-00c04fd430c8, "
                    "'2020-01-02 03:04:05+0000', 0xCAFE, false, -1.5e3)")
    row = session.execute("SELECT * FROM lit WHERE id = 6ba7b810-9dad-11d1-80b4-00c04fd430c8").one()
    assert row.id == uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    assert row.ts == datetime.datetime(2020, 1, 2, 3, 4, 5)
    assert (row.b, row.f, row.d) == (b"\xca\xfe", False, -1500.0)


def test_unset_values_leave_columns_untouched(session):
    session.execute("INSERT INTO events (tenant, seq, body, owner) VALUES ('u', 1, 'first', 'alice')")
    update = session.prepare("UPDATE events SET body = ?, owner = ? WHERE tenant = ? AND seq = ?")
    session.execute(update, (UNSET_VALUE, "bob", "u", 1))
    row = session.execute("SELECT body, owner FROM events WHERE tenant = 'u' AND seq = 1").one()
    assert (row.body, row.owner) == ("first", "bob")
    with pytest.raises(InvalidRequest, match="unset value"):
        session.execute(update, ("x", "y", "u", UNSET_VALUE))


def test_clustering_ranges_order_and_limit(session):
    insert = session.prepare("INSERT INTO desc_events (p, c, v) VALUES (?, ?, ?)")
    for c in range(10):
        session.execute(insert, (1, c, c * c))
    def cs(query, *params):
        return [r.c for r in session.execute(query, params)]
    assert cs("SELECT c FROM desc_events WHERE p = 1") == list(range(9, -1, -1))
    assert cs("SELECT c FROM desc_events WHERE p = 1 ORDER BY c ASC LIMIT 3") == [0, 1, 2]
    assert cs("SELECT c FROM desc_events WHERE p = 1 AND c > %s AND c <= %s", 3, 6) == [6, 5, 4]
    assert cs("SELECT c FROM desc_events WHERE p = 1 AND c IN (2, 8, 5)") == [8, 5, 2]
    assert session.execute("SELECT count(*) FROM desc_events WHERE p = 1 AND c >= 5").one().count == 5
    with pytest.raises(InvalidRequest, match="ALLOW FILTERING"):
        session.execute("SELECT * FROM desc_events WHERE v = 4")
    assert cs("SELECT c FROM desc_events WHERE v = 4 ALLOW FILTERING") == [2]


def test_paging_with_fetch_size_and_explicit_paging_state(session):
    session.execute("CREATE TABLE IF NOT EXISTS paged (p int, c int, PRIMARY KEY (p, c))")
    insert = session.prepare("INSERT INTO paged (p, c) VALUES (?, ?)")
    for p in range(5):
        for c in range(7):
            session.execute(insert, (p, c))
    everything = list(session.execute(SimpleStatement("SELECT p, c FROM paged", fetch_size=4)))
    assert len(everything) == 35
    assert len(set(everything)) == 35
    # Partitions come in token order, rows within a partition in clustering order.
    for p in range(5):
        assert [r.c for r in everything if r.p == p] == list(range(7))

    select = session.prepare("SELECT c FROM paged WHERE p = ?")
    select.fetch_size = 3
    first = session.execute(select, (2,))
    assert [r.c for r in first.current_rows] == [0, 1, 2]
    assert first.has_more_pages
    state = first.paging_state
    session.execute("DELETE FROM paged WHERE p = 2 AND c = 3")  # rows vanishing between pages
    second = session.execute(select, (2,), paging_state=state)
    assert [r.c for r in second.current_rows] == [4, 5, 6]
    assert [r.c for r in session.execute(SimpleStatement("SELECT c FROM paged WHERE p = 2 LIMIT 4",
                                                         fetch_size=2))] == [0, 1, 2, 4]


def test_in_on_partition_key_and_distinct(session):
    for k in "abc":
        session.execute("INSERT INTO kv (k, v) VALUES (%s, %s)", (k, ord(k)))
    rows = session.execute(session.prepare("SELECT k, v FROM kv WHERE k IN ?"), (["c", "a", "zz"],))
    assert sorted((r.k, r.v) for r in rows) == [("a", 97), ("c", 99)]
    assert {r.k for r in session.execute("SELECT DISTINCT k FROM kv")} >= {"a", "b", "c"}


def test_static_columns_and_partition_only_rows(session):
    session.execute("UPDATE events SET owner = 'carol' WHERE tenant = 'static-only'")
    rows = list(session.execute("SELECT * FROM events WHERE tenant = 'static-only'"))
    assert [(r.tenant, r.seq, r.body, r.owner) for r in rows] == [("static-only", None, None, "carol")]
    assert list(session.execute("SELECT * FROM events WHERE tenant = 'static-only' AND seq = 1")) == []
    session.execute("INSERT INTO events (tenant, seq, body) VALUES ('static-only', 1, 'x')")
    assert [(r.seq, r.owner) for r in session.execute("SELECT seq, owner FROM events WHERE tenant = 'static-only'")] \
        == [(1, "carol")]
    with pytest.raises(InvalidRequest, match="modifies only static columns"):
        session.execute("UPDATE events SET owner = 'x' WHERE tenant = 'static-only' AND seq = 1")


def test_delete_shapes(session):
    insert = session.prepare("INSERT INTO events (tenant, seq, body, owner) VALUES (?, ?, ?, ?)")
    for seq in range(6):
        session.execute(insert, ("del", seq, f"b{seq}", "o"))
    session.execute("DELETE body FROM events WHERE tenant = 'del' AND seq = 0")
    session.execute("DELETE FROM events WHERE tenant = 'del' AND seq = 1")
    session.execute("DELETE FROM events WHERE tenant = 'del' AND seq >= 4")
    rows = [(r.seq, r.body) for r in session.execute("SELECT seq, body FROM events WHERE tenant = 'del'")]
    assert rows == [(0, None), (2, "b2"), (3, "b3")]  # row 0 survives: INSERT wrote a row marker
    session.execute("DELETE owner FROM events WHERE tenant = 'del'")
    assert {r.owner for r in session.execute("SELECT owner FROM events WHERE tenant = 'del'")} == {None}
    session.execute("DELETE FROM events WHERE tenant = 'del'")
    assert list(session.execute("SELECT * FROM events WHERE tenant = 'del'")) == []


def test_ttl_expiry_with_advanced_clock(session, server):
    session.execute("INSERT INTO events (tenant, seq, body) VALUES ('ttl', 1, 'short') USING TTL 10")
    session.execute(session.prepare("UPDATE events USING TTL ? SET owner = ? WHERE tenant = ?"), (100, "o", "ttl"))
    session.execute("INSERT INTO events (tenant, seq, body) VALUES ('ttl', 2, 'forever')")
    row = session.execute("SELECT ttl(body) AS t, writetime(body) AS w FROM events WHERE tenant='ttl' AND seq=1").one()
    assert 9 <= row.t <= 10
    assert row.w > 0
    server.advance_clock(11)
    rows = [(r.seq, r.owner) for r in session.execute("SELECT seq, owner FROM events WHERE tenant = 'ttl'")]
    assert rows == [(2, "o")]
    server.advance_clock(100)
    assert [(r.seq, r.owner) for r in session.execute("SELECT seq, owner FROM events WHERE tenant = 'ttl'")] \
        == [(2, None)]
    session.execute("UPDATE kv USING TTL 5 SET v = 1 WHERE k = 'ttl-update'")  # no row marker: cells only
    server.advance_clock(6)
    assert session.execute("SELECT * FROM kv WHERE k = 'ttl-update'").one() is None


def test_table_default_ttl(session, server):
    session.execute("CREATE TABLE IF NOT EXISTS ephemeral (k int PRIMARY KEY, v int) WITH default_time_to_live = 30")
    session.execute("INSERT INTO ephemeral (k, v) VALUES (1, 1)")
    session.execute("INSERT INTO ephemeral (k, v) VALUES (2, 2) USING TTL 0")
    server.advance_clock(31)
    assert [r.k for r in session.execute("SELECT k FROM ephemeral")] == [2]


def test_unlogged_and_logged_batches(session, server):
    insert = session.prepare("INSERT INTO kv (k, v) VALUES (?, ?)")
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    batch.add(insert, ("b1", 1))
    batch.add(SimpleStatement("INSERT INTO kv (k, v) VALUES (%s, %s)"), ("b2", 2))
    batch.add("DELETE FROM kv WHERE k = 'b1'")
    session.execute(batch)
    session.execute("BEGIN BATCH INSERT INTO kv (k, v) VALUES ('b3', 3); UPDATE kv SET v = 4 WHERE k = 'b4'; "
                    "APPLY BATCH")
    values = {r.k: r.v for r in session.execute("SELECT k, v FROM kv WHERE k IN ('b1', 'b2', 'b3', 'b4')")}
    assert values == {"b2": 2, "b3": 3, "b4": 4}
    assert server.stats().ops("kv", "write") == 5


def test_errors_are_proper_error_frames(session):
    with pytest.raises(SyntaxException):
        session.execute("SELEKT * FROM kv")
    with pytest.raises(InvalidRequest, match="table nope does not exist"):
        session.execute("SELECT * FROM nope")
    with pytest.raises(InvalidRequest, match="Undefined column name zz"):
        session.execute("SELECT zz FROM kv")
    with pytest.raises(InvalidRequest, match="Some partition key parts are missing"):
        session.execute("INSERT INTO events (seq, body) VALUES (1, 'x')")
    with pytest.raises(InvalidRequest, match="Some clustering keys are missing"):
        session.execute("UPDATE events SET body = 'x' WHERE tenant = 'e'")
    with pytest.raises(InvalidRequest, match="serializable writes"):
        session.execute(SimpleStatement("INSERT INTO kv (k, v) VALUES ('s', 1)", consistency_level=8))
    with pytest.raises(InvalidRequest, match="Non PRIMARY KEY columns found in where clause"):
        session.execute("DELETE FROM kv WHERE v = 1")
    with pytest.raises(InvalidRequest, match="Type counter is not supported"):
        session.execute("CREATE TABLE counters (k int PRIMARY KEY, n counter)")
    # The server survives garbage and keeps serving.
    assert session.execute("SELECT count(*) FROM kv").one().count >= 0


def test_truncate_and_server_side_helpers(session, server):
    server.execute("INSERT INTO ks.kv (k, v) VALUES (?, ?)", ["helper", 42])
    assert server.execute("SELECT v FROM ks.kv WHERE k = 'helper'") == [{"v": 42}]
    when = datetime.datetime(2024, 5, 1, 12, 0, 0, 250000)
    server.execute("INSERT INTO ks.lit (id, ts) VALUES (?, ?)", [uuid.UUID(int=7), when])
    assert session.execute("SELECT ts FROM lit WHERE id = %s", (uuid.UUID(int=7),)).one().ts == when
    assert [r["ts"] for r in server.rows("ks", "lit") if r["id"] == uuid.UUID(int=7)] == [when]
    assert "ks.kv" in server.tables
    session.execute("TRUNCATE kv")
    assert server.rows("ks", "kv") == []
