"""Lightweight transactions: [applied], current values, static guards, conditional batches."""

from __future__ import annotations

import pytest
from cassandra import ConsistencyLevel, InvalidRequest
from cassandra.query import BatchStatement, SimpleStatement

QUORUM_WRITE = ConsistencyLevel.LOCAL_QUORUM


@pytest.fixture(scope="module", autouse=True)
def schema(session):
    session.execute("CREATE TABLE IF NOT EXISTS word_counts (word text PRIMARY KEY, txid bigint, count bigint, "
                    "prev_count bigint)")
    session.execute("CREATE TABLE IF NOT EXISTS state (topology text, txid bigint, epoch bigint static, "
                    "owner text static, ranges text, committed boolean, PRIMARY KEY (topology, txid))")


def _row(result):
    return dict(result.one()._asdict())


def test_insert_if_not_exists_returns_existing_row(session):
    insert = session.prepare("INSERT INTO word_counts (word, txid, count) VALUES (?, ?, ?) IF NOT EXISTS")
    first = session.execute(insert, ("the", 1, 10))
    assert first.was_applied
    assert first.column_names == ["[applied]"]
    second = session.execute(insert, ("the", 2, 99))
    assert not second.was_applied
    assert second.column_names == ["[applied]", "word", "count", "prev_count", "txid"]
    assert _row(second) == {"applied": False, "word": "the", "count": 10, "prev_count": None, "txid": 1}


def test_update_if_column_equals(session):
    session.execute("INSERT INTO word_counts (word, txid, count) VALUES ('cas', 1, 5)")
    update = session.prepare("UPDATE word_counts SET txid = ?, count = ?, prev_count = ? WHERE word = ? IF txid = ?")
    won = session.execute(update, (2, 8, 5, "cas", 1))
    assert won.was_applied
    assert won.column_names == ["[applied]"]
    lost = session.execute(update, (3, 9, 8, "cas", 1))
    assert not lost.was_applied
    assert _row(lost) == {"applied": False, "txid": 2}
    row = session.execute("SELECT txid, count, prev_count FROM word_counts WHERE word = 'cas'").one()
    assert (row.txid, row.count, row.prev_count) == (2, 8, 5)


def test_conditions_on_missing_row(session):
    update = session.prepare("UPDATE word_counts SET count = ? WHERE word = ? IF txid = ?")
    missing = session.execute(update, (1, "ghost", 1))
    # Cassandra: nothing was read, so only the [applied] column comes back.
    assert not missing.was_applied
    assert missing.column_names == ["[applied]"]
    by_null = session.execute("UPDATE word_counts SET count = 1, txid = 7 WHERE word = 'ghost' IF txid = null")
    assert by_null.was_applied
    if_exists = session.execute("UPDATE word_counts SET count = 2 WHERE word = 'nobody' IF EXISTS")
    assert not if_exists.was_applied
    assert if_exists.column_names == ["[applied]"]
    assert session.execute("SELECT * FROM word_counts WHERE word = 'nobody'").one() is None


def test_comparison_and_inequality_conditions(session):
    session.execute("INSERT INTO word_counts (word, txid, count, prev_count) VALUES ('ops', 5, 50, 40)")
    cases = [
        ("txid < 6", True), ("txid < 5", False), ("txid > 4 AND count >= 50", True), ("count <= 49", False),
        ("prev_count != 40", False), ("prev_count != 41", True), ("txid IN (1, 5)", True),
        ("txid = 5 AND count = 51", False),
    ]
    for condition, expected in cases:
        result = session.execute(f"UPDATE word_counts SET prev_count = 40 WHERE word = 'ops' IF {condition}")
        assert result.was_applied is expected, condition
        if not expected:
            names = result.column_names[1:]
            assert all(n in ("txid", "count", "prev_count") for n in names)
            assert names
    with pytest.raises(InvalidRequest, match="Invalid comparison with null"):
        session.execute(session.prepare("UPDATE word_counts SET count = 1 WHERE word = 'ops' IF txid > ?"), (None,))
    with pytest.raises(InvalidRequest, match="cannot have IF conditions"):
        session.execute("UPDATE word_counts SET count = 1 WHERE word = 'ops' IF word = 'ops'")


def test_delete_if_exists_and_if_condition(session):
    session.execute("INSERT INTO word_counts (word, txid, count) VALUES ('gone', 3, 30)")
    assert not session.execute("DELETE FROM word_counts WHERE word = 'gone' IF txid = 2").was_applied
    result = session.execute("DELETE FROM word_counts WHERE word = 'gone' IF txid = 3")
    assert result.was_applied
    again = session.execute("DELETE FROM word_counts WHERE word = 'gone' IF EXISTS")
    assert not again.was_applied
    assert again.column_names == ["[applied]"]
    session.execute("INSERT INTO word_counts (word, txid) VALUES ('gone', 1)")
    assert session.execute("DELETE FROM word_counts WHERE word = 'gone' IF EXISTS").was_applied
    assert session.execute("SELECT * FROM word_counts WHERE word = 'gone'").one() is None


def test_static_epoch_guards_rows_of_the_same_partition(session):
    lease = session.prepare("UPDATE state SET epoch = ?, owner = ? WHERE topology = ? IF epoch = ?")
    assert session.execute(lease, (1, "coord-a", "topo", None)).was_applied  # first takeover
    takeover = session.execute(lease, (2, "coord-b", "topo", 1))
    assert takeover.was_applied

    freeze = session.prepare("UPDATE state SET ranges = ? WHERE topology = ? AND txid = ? IF epoch = ?")
    zombie = session.execute(freeze, ("r1", "topo", 10, 1))
    assert not zombie.was_applied
    # Only static conditions: Cassandra reads the partition's static row (no clustering row here yet).
    assert _row(zombie) == {"applied": False, "epoch": 2}
    assert session.execute(freeze, ("r1", "topo", 10, 2)).was_applied

    commit = session.prepare("INSERT INTO state (topology, txid, committed) VALUES (?, ?, ?) IF NOT EXISTS")
    assert session.execute(commit, ("topo", 11, True)).was_applied
    stale = session.execute(freeze, ("r2", "topo", 11, 1))
    assert _row(stale) == {"applied": False, "epoch": 2}
    mixed = session.execute("UPDATE state SET committed = true WHERE topology = 'topo' AND txid = 10 "
                            "IF epoch = 2 AND committed = false")
    assert _row(mixed) == {"applied": False, "epoch": 2, "committed": None}
    rows = {r.txid: (r.epoch, r.owner, r.ranges, r.committed)
            for r in session.execute("SELECT * FROM state WHERE topology = 'topo'")}
    assert rows == {10: (2, "coord-b", "r1", None), 11: (2, "coord-b", None, True)}


def test_lease_insert_if_not_exists_on_static_columns(session):
    take = session.prepare("INSERT INTO state (topology, epoch, owner) VALUES (?, ?, ?) IF NOT EXISTS USING TTL ?")
    assert session.execute(take, ("leased", 1, "a", 30)).was_applied
    lost = session.execute(take, ("leased", 5, "b", 30))
    assert not lost.was_applied
    row = _row(lost)
    assert (row["epoch"], row["owner"], row["txid"]) == (1, "a", None)


def test_lease_ttl_expires_and_can_be_retaken(session, server):
    take = session.prepare("UPDATE state USING TTL ? SET owner = ?, epoch = ? WHERE topology = ? IF owner = null")
    assert session.execute(take, (10, "a", 1, "ttl-lease")).was_applied
    assert not session.execute(take, (10, "b", 2, "ttl-lease")).was_applied
    server.advance_clock(11)
    assert session.execute(take, (10, "b", 2, "ttl-lease")).was_applied
    row = session.execute("SELECT owner, epoch FROM state WHERE topology = 'ttl-lease'").one()
    assert (row.owner, row.epoch) == ("b", 2)


def test_conditional_batch_all_or_nothing(session):
    session.execute("UPDATE state SET epoch = 7 WHERE topology = 'batch'")
    session.execute("INSERT INTO state (topology, txid, ranges) VALUES ('batch', 1, 'a')")
    freeze = session.prepare("UPDATE state SET ranges = ? WHERE topology = ? AND txid = ? IF epoch = ?")
    mark = session.prepare("INSERT INTO state (topology, txid, committed) VALUES (?, ?, ?) IF NOT EXISTS")
    plain = session.prepare("UPDATE state SET owner = ? WHERE topology = ?")

    losing = BatchStatement(serial_consistency_level=ConsistencyLevel.LOCAL_SERIAL)
    losing.add(freeze, ("b", "batch", 2, 7))
    losing.add(mark, ("batch", 1, True))  # row 1 exists -> the whole batch fails
    losing.add(plain, ("zombie", "batch"))
    result = session.execute(losing)
    assert not result.was_applied
    # IF NOT EXISTS in the batch: every column, one row per existing conditioned row.
    assert result.column_names == ["[applied]", "topology", "txid", "epoch", "owner", "committed", "ranges"]
    assert [tuple(r) for r in result] == [(False, "batch", 1, 7, None, None, "a")]
    assert session.execute("SELECT owner FROM state WHERE topology = 'batch'").one().owner is None
    assert session.execute("SELECT * FROM state WHERE topology = 'batch' AND txid = 2").one() is None

    winning = BatchStatement()
    winning.add(freeze, ("b", "batch", 2, 7))
    winning.add(mark, ("batch", 3, True))
    winning.add(plain, ("coord", "batch"))
    assert session.execute(winning).was_applied
    rows = {r.txid: (r.ranges, r.committed, r.owner) for r in session.execute(
        "SELECT * FROM state WHERE topology = 'batch'")}
    assert rows == {1: ("a", None, "coord"), 2: ("b", None, "coord"), 3: (None, True, "coord")}


def test_conditional_batch_reports_condition_columns_with_primary_key(session):
    session.execute("INSERT INTO state (topology, txid, ranges, committed) VALUES ('cb', 1, 'x', false)")
    batch = BatchStatement()
    batch.add(SimpleStatement("UPDATE state SET committed = true WHERE topology = 'cb' AND txid = 1 IF ranges = 'y'"))
    batch.add(SimpleStatement("UPDATE state SET committed = true WHERE topology = 'cb' AND txid = 2 IF ranges = 'z'"))
    result = session.execute(batch)
    assert not result.was_applied
    assert result.column_names == ["[applied]", "topology", "txid", "ranges"]
    assert [tuple(r) for r in result] == [(False, "cb", 1, "x")]  # row 2 does not exist: not reported
    cql = session.execute("BEGIN BATCH UPDATE state SET committed = true WHERE topology = 'cb' AND txid = 1 "
                          "IF ranges = 'x'; INSERT INTO state (topology, txid) VALUES ('cb', 5); APPLY BATCH")
    assert cql.was_applied
    with pytest.raises(InvalidRequest, match="cannot span multiple partitions"):
        session.execute("BEGIN BATCH UPDATE state SET ranges = 'q' WHERE topology = 'cb' AND txid = 1 IF ranges = 'x'; "
                        "INSERT INTO state (topology, txid) VALUES ('other', 1); APPLY BATCH")
    with pytest.raises(InvalidRequest, match="cannot span multiple tables"):
        session.execute("BEGIN BATCH UPDATE state SET ranges = 'q' WHERE topology = 'cb' AND txid = 1 IF ranges = 'x'; "
                        "INSERT INTO word_counts (word) VALUES ('cb'); APPLY BATCH")


def test_invalid_conditional_shapes(session):
    with pytest.raises(InvalidRequest, match="IN on the partition key is not supported with conditional"):
        session.execute("UPDATE word_counts SET count = 1 WHERE word IN ('a', 'b') IF txid = 1")
    with pytest.raises(InvalidRequest, match="custom timestamp"):
        session.execute("UPDATE word_counts USING TIMESTAMP 5 SET count = 1 WHERE word = 'a' IF txid = 1")
    with pytest.raises(InvalidRequest, match="must be one of SERIAL or LOCAL_SERIAL"):  # noqa: PT012  the block is the step under test
        bad = SimpleStatement("UPDATE word_counts SET count = 1 WHERE word = 'a' IF txid = 1")
        bad._serial_consistency_level = ConsistencyLevel.QUORUM  # bypass the driver's own check
        session.execute(bad)


def test_serial_read_and_recorded_consistency_levels(session, server):
    write = session.prepare("UPDATE word_counts SET count = ?, txid = ? WHERE word = ? IF txid = ?")
    write.consistency_level = QUORUM_WRITE
    write.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
    session.execute("INSERT INTO word_counts (word, txid, count) VALUES ('serial', 1, 1)")
    server.reset_counts()
    assert session.execute(write, (2, 2, "serial", 1)).was_applied
    read = session.prepare("SELECT txid, count FROM word_counts WHERE word = ?")
    read.consistency_level = ConsistencyLevel.LOCAL_SERIAL
    row = session.execute(read, ("serial",)).one()
    assert (row.txid, row.count) == (2, 2)
    stats = server.stats()
    assert stats.consistency["cas"] == "LOCAL_QUORUM"
    assert stats.serial_consistency["cas"] == "LOCAL_SERIAL"
    assert stats.consistency["read"] == "LOCAL_SERIAL"
    assert stats.ops("word_counts", "cas") == 1
    assert stats.ops("ks.word_counts", "serial_read") == 1
    with pytest.raises(InvalidRequest, match="one partition at a time"):
        session.execute(SimpleStatement("SELECT * FROM word_counts", consistency_level=ConsistencyLevel.SERIAL))
