"""Injected faults surface as the driver's exceptions; request counting is exact."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cassandra import ConsistencyLevel, OperationTimedOut, ReadTimeout, Unavailable, WriteTimeout, WriteType
from cassandra.cluster import ExecutionProfile, NoHostAvailable
from cassandra.policies import (
    ConstantReconnectionPolicy,
    DCAwareRoundRobinPolicy,
    FallthroughRetryPolicy,
    TokenAwarePolicy,
)
from cassandra.protocol import OverloadedErrorMessage, ServerError
from cassandra.query import BatchStatement, SimpleStatement

from tests.cqlserver import CqlServer, Fault
from tests.cqlserver.fixtures import connect_cluster

RAW = "raw"  # execution profile without retries: errors come back exactly as the server sent them


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def cluster(cql_server_module: CqlServer) -> Iterator[Any]:
    cluster = connect_cluster(cql_server_module, reconnection_policy=ConstantReconnectionPolicy(0.05, None))
    cluster.add_execution_profile(RAW, ExecutionProfile(
        load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc="datacenter1")),
        retry_policy=FallthroughRetryPolicy(), request_timeout=10))
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def session(cluster: Any) -> Any:
    s = cluster.connect()
    s.execute("CREATE KEYSPACE IF NOT EXISTS fk WITH replication = {'class': 'SimpleStrategy', "
              "'replication_factor': 1}")
    s.set_keyspace("fk")
    s.execute("CREATE TABLE IF NOT EXISTS word_counts (word text PRIMARY KEY, txid bigint, count bigint)")
    s.execute("CREATE TABLE IF NOT EXISTS other (k int PRIMARY KEY, v int)")
    return s


@pytest.fixture
def cas(session: Any) -> Any:
    stmt = session.prepare("UPDATE word_counts SET txid = ?, count = ? WHERE word = ? IF txid = ?")
    stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
    stmt.serial_consistency_level = ConsistencyLevel.LOCAL_SERIAL
    return stmt


def _serial_read(session: Any, word: str) -> Any:
    return session.execute(SimpleStatement("SELECT txid, count FROM word_counts WHERE word = %s",
                                           consistency_level=ConsistencyLevel.SERIAL), (word,)).one()


@pytest.mark.parametrize("applied", [False, True])
def test_cas_write_timeout_applied_or_not(session, server, cas, applied):
    word = f"wt-{applied}"
    session.execute("INSERT INTO word_counts (word, txid, count) VALUES (%s, 1, 10)", (word,))
    fault = server.inject(Fault.write_timeout_cas(applied=applied, table="word_counts"))
    with pytest.raises(WriteTimeout) as exc:
        session.execute(cas, (2, 20, word, 1))  # default retry policy rethrows CAS timeouts
    assert exc.value.write_type == WriteType.CAS
    assert exc.value.consistency == ConsistencyLevel.LOCAL_SERIAL
    assert fault.fired == 1
    # The unknown outcome is resolved by a SERIAL read, as the product does.
    row = _serial_read(session, word)
    assert (row.txid, row.count) == ((2, 20) if applied else (1, 10))


def test_third_conditional_update_on_table_times_out_with_write_applied(session, server, cas):
    for i in range(5):
        session.execute("INSERT INTO word_counts (word, txid, count) VALUES (%s, 0, 0)", (f"w{i}",))
    session.execute("INSERT INTO other (k, v) VALUES (1, 1)")
    fault = server.inject(Fault.write_timeout_cas(applied=True, table="word_counts", statement="update", after=2))
    outcomes = []
    for i in range(5):
        session.execute("UPDATE other SET v = 2 WHERE k = 1 IF v = 1")  # conditional, other table: ignored
        try:
            outcomes.append(session.execute(cas, (1, 1, f"w{i}", 0)).was_applied)
        except WriteTimeout:
            outcomes.append("timeout")
    assert outcomes == [True, True, "timeout", True, True]
    assert (fault.seen, fault.fired) == (3, 1)
    assert _serial_read(session, "w2").txid == 1  # applied despite the timeout


def test_simple_write_timeout_read_timeout_and_unavailable(session, server):
    server.inject(Fault.write_timeout(statement="insert", table="other"))
    with pytest.raises(WriteTimeout) as wt:
        session.execute("INSERT INTO other (k, v) VALUES (10, 10)")
    assert wt.value.write_type == WriteType.SIMPLE
    assert wt.value.consistency == ConsistencyLevel.LOCAL_ONE
    assert server.rows("fk", "other") == [r for r in server.rows("fk", "other") if r["k"] != 10]

    server.inject(Fault.read_timeout(table="other"))
    with pytest.raises(ReadTimeout) as rt:
        session.execute(SimpleStatement("SELECT * FROM other WHERE k = 1",
                                        consistency_level=ConsistencyLevel.LOCAL_QUORUM))
    assert rt.value.consistency == ConsistencyLevel.LOCAL_QUORUM
    assert rt.value.received_responses == 0

    server.inject(Fault.unavailable(table="other", times=2))
    with pytest.raises(Unavailable) as un:
        session.execute("SELECT * FROM other WHERE k = 1", execution_profile=RAW)
    assert (un.value.required_replicas, un.value.alive_replicas) == (1, 0)
    with pytest.raises(NoHostAvailable) as nh:  # default policy retries on the next host: there is none
        session.execute("SELECT * FROM other WHERE k = 1")
    assert any(isinstance(e, Unavailable) for e in nh.value.errors.values())
    assert session.execute("SELECT v FROM other WHERE k = 1").one() is not None


def test_overloaded_and_server_error(session, server):
    server.inject(Fault.overloaded(cql_contains="FROM other"))
    with pytest.raises(OverloadedErrorMessage):
        session.execute("SELECT * FROM other WHERE k = 1", execution_profile=RAW)
    server.inject(Fault.server_error("boom", opcode="QUERY"))
    with pytest.raises(ServerError, match="boom"):
        session.execute("SELECT * FROM other WHERE k = 1", execution_profile=RAW)


@pytest.mark.parametrize("applied", [False, True])
def test_drop_connection_optionally_after_applying(cql_server_module, server, applied):
    # Own Cluster: after a dropped connection the driver marks the node down and recycles its
    # control connection (python-driver's _ReconnectionHandler.run then closes the new one in
    # `finally`), which would disturb the module's shared cluster.
    cluster = connect_cluster(cql_server_module, reconnection_policy=ConstantReconnectionPolicy(0.05, None))
    try:
        session = cluster.connect("fk")
        key = 100 + int(applied)
        server.inject(Fault.drop_connection(applied=applied, statement="insert", table="other"))
        with pytest.raises(NoHostAvailable):
            session.execute("INSERT INTO other (k, v) VALUES (%s, 1)", (key,))
        assert any(r["k"] == key for r in server.rows("fk", "other")) is applied
        wait_until(lambda: cluster.metadata.all_hosts()[0].is_up)
        assert session.execute("SELECT k FROM other WHERE k = %s", (key,)).one() is not None or not applied
    finally:
        cluster.shutdown()


def test_delay_adds_its_latency(session, server):
    """A delayed request is answered no sooner than its delay (a lower bound: load only adds to it)."""
    fault = server.inject(Fault.delay(0.3, cql_contains="k = 7"))
    start = time.monotonic()
    session.execute("SELECT * FROM other WHERE k = 7")
    assert time.monotonic() - start >= 0.3
    assert fault.fired == 1


def test_a_held_request_does_not_block_other_streams(session, server):
    """While one request is held on the server, another is answered; the held one is answered once released."""
    release = threading.Event()
    held = server.inject(Fault.hold(release, cql_contains="k = 7"))
    answered = threading.Event()
    slow = session.execute_async("SELECT * FROM other WHERE k = 7")
    slow.add_callbacks(lambda _: answered.set(), lambda _: answered.set())
    try:
        wait_until(lambda: held.fired == 1)  # the server holds k = 7 from here on
        session.execute("SELECT * FROM other WHERE k = 8")
        assert not answered.is_set()
    finally:
        release.set()
    slow.result()
    assert answered.is_set()


def test_a_client_timeout_shorter_than_the_hold_fires(session, server):
    release = threading.Event()
    server.inject(Fault.hold(release, table="other"))
    try:
        with pytest.raises(OperationTimedOut):
            session.execute("SELECT * FROM other WHERE k = 9", timeout=0.1)
    finally:
        release.set()


def test_faults_leave_driver_metadata_queries_alone(cluster, session, server):
    server.inject(Fault.unavailable(times=None))  # every application request
    cluster.refresh_schema_metadata()  # system_schema reads still work
    assert "word_counts" in cluster.metadata.keyspaces["fk"].tables
    assert session.prepare("SELECT * FROM other WHERE k = ?") is not None  # PREPARE is not matched
    with pytest.raises(NoHostAvailable):
        session.execute("SELECT * FROM other WHERE k = 1")
    server.clear_faults()
    server.inject(Fault.unavailable(opcode="PREPARE", table="other"))
    with pytest.raises(NoHostAvailable) as exc:
        session.prepare("SELECT v FROM other WHERE k = ?")
    assert any(isinstance(e, Unavailable) for e in exc.value.errors.values())


def test_conditional_batch_fault_and_batch_counting(session, server):
    insert = session.prepare("INSERT INTO other (k, v) VALUES (?, ?)")
    batch = BatchStatement()
    batch.add(insert, (1, 1))
    batch.add(insert, (2, 2))
    batch.add(insert, (3, 3))
    session.execute(batch)
    conditional = BatchStatement()
    conditional.add(SimpleStatement("UPDATE other SET v = 5 WHERE k = 1 IF v = 1"))
    conditional.add(SimpleStatement("UPDATE other SET v = 6 WHERE k = 1"))
    server.inject(Fault.write_timeout_cas(applied=False, statement="batch"))
    with pytest.raises(WriteTimeout):
        session.execute(conditional)
    assert session.execute(conditional).was_applied
    stats = server.stats()
    assert stats.ops("other", "write") == 3  # one per statement of the unconditional batch
    assert stats.ops("other", "cas") == 2  # a conditional batch is one Paxos round
    assert stats.requests == {"PREPARE": 1, "BATCH": 3}
    assert stats.faults_fired == 1


def test_request_counting_and_log(session, server):
    select = session.prepare("SELECT * FROM word_counts WHERE word = ?")
    write = session.prepare("INSERT INTO word_counts (word, txid) VALUES (?, ?)")
    write.consistency_level = ConsistencyLevel.LOCAL_QUORUM
    server.reset_counts()
    for i in range(3):
        session.execute(write, (f"c{i}", i))
        session.execute(select, (f"c{i}",))
    session.execute("UPDATE word_counts SET count = 1 WHERE word = 'c0' IF txid = 0")
    assert server.request_count() == 7
    assert server.request_count("EXECUTE") == 6
    assert server.request_count("QUERY") == 1
    assert server.request_count("select") == 3
    assert server.request_count("update") == 1
    stats = server.stats()
    assert stats.ops("word_counts", "read") == 3
    assert stats.ops("word_counts", "write") == 3
    assert stats.ops("fk.word_counts", "cas") == 1
    assert stats.consistency["write"] == "LOCAL_QUORUM"
    log = server.request_log()
    assert [r.kind for r in log] == ["insert", "select"] * 3 + ["update"]
    assert log[-1].conditional
    assert log[-1].serial_consistency is None  # as sent: server default SERIAL
    assert server.request_count(include_system=True) >= server.request_count()
    server.reset_counts()
    assert server.request_count() == 0
    assert server.stats().table_ops == {}
