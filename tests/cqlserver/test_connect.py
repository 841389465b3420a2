"""The real driver connects with default settings, reads metadata, routes token-aware."""

from __future__ import annotations

import logging
import time

import pytest
from cassandra import AuthenticationFailed, ProtocolVersion
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster, NoHostAvailable
from cassandra.query import SimpleStatement

from tests.cqlserver import CqlServer
from tests.cqlserver.fixtures import connect_cluster


def _driver_problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Driver log lines at WARNING+ other than the protocol/LBP notices real Cassandra triggers too."""
    expected = ("Downgrading core protocol version", "no load_balancing_policy")
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and not any(e in r.getMessage() for e in expected)]


def test_default_cluster_negotiates_v5_directly_without_errors(cql_server, caplog):
    """v5 accepted when first offered (the driver offers DSE versions before it), no driver warning
    (an unanswered handshake would log one)."""
    caplog.set_level(logging.DEBUG, logger="cassandra")
    cluster = Cluster(contact_points=["127.0.0.1"], port=cql_server.port)
    try:
        session = cluster.connect()
        assert cluster.protocol_version == ProtocolVersion.V5
        assert not [r for r in caplog.records if "Downgrading core protocol version from 5" in r.getMessage()]
        row = session.execute("SELECT release_version, data_center, partitioner FROM system.local "
                              "WHERE key='local'").one()
        assert row.release_version.startswith("4.1")
        assert row.data_center == "datacenter1"
        assert row.partitioner.endswith("Murmur3Partitioner")
        host = cluster.metadata.all_hosts()[0]
        assert host.datacenter == "datacenter1"
        assert host.rack == "rack1"
        assert host.is_up
        assert cluster.metadata.cluster_name == "Test Cluster"
        assert list(session.execute("SELECT * FROM system.peers_v2")) == []
    finally:
        cluster.shutdown()
    assert _driver_problems(caplog) == []


def test_v4_only_server_makes_driver_settle_on_v4(caplog):
    caplog.set_level(logging.WARNING, logger="cassandra")
    with CqlServer(protocol_versions=(4,)) as server:
        cluster = Cluster(contact_points=["127.0.0.1"], port=server.port)
        try:
            session = cluster.connect()
            assert cluster.protocol_version == 4
            assert session.execute("SELECT key FROM system.local").one().key == "local"
            # v4 encodings (byte flags, no metadata ids) through prepared statements, paging and LWT.
            session.execute("CREATE KEYSPACE v4 WITH replication = {'class': 'SimpleStrategy', "
                            "'replication_factor': 1}")
            session.execute("CREATE TABLE v4.t (k int, c int, v text, PRIMARY KEY (k, c))")
            insert = session.prepare("INSERT INTO v4.t (k, c, v) VALUES (?, ?, ?) IF NOT EXISTS")
            assert all(session.execute(insert, (1, c, str(c))).was_applied for c in range(5))
            again = session.execute(insert, (1, 0, "again"))
            assert not again.was_applied
            assert again.one().v == "0"
            select = session.prepare("SELECT c FROM v4.t WHERE k = ?")
            select.fetch_size = 2
            assert [r.c for r in session.execute(select, (1,))] == [0, 1, 2, 3, 4]
        finally:
            cluster.shutdown()
    downgrades = [r.getMessage() for r in caplog.records if "Downgrading" in r.getMessage()]
    assert [msg for msg in downgrades if "from 5" in msg or "from 4" in msg] == downgrades[-1:]  # v5, then v4
    assert "from 5 to 4" in downgrades[-1]
    assert _driver_problems(caplog) == []


def test_schema_metadata_tracks_ddl(cql_server):
    cluster = connect_cluster(cql_server)
    try:
        session = cluster.connect()
        session.execute("CREATE KEYSPACE meta WITH replication = {'class': 'NetworkTopologyStrategy', "
                        "'datacenter1': 1} AND durable_writes = false")
        session.execute('CREATE TABLE meta."Events" (tenant text, day int, seq bigint, "Payload" blob, '
                        'owner text static, PRIMARY KEY ((tenant, day), seq)) '
                        'WITH CLUSTERING ORDER BY (seq DESC) AND default_time_to_live = 60')
        ks = cluster.metadata.keyspaces["meta"]
        assert ks.durable_writes is False
        assert ks.replication_strategy.name == "NetworkTopologyStrategy"
        table = ks.tables["Events"]
        assert [c.name for c in table.partition_key] == ["tenant", "day"]
        assert [c.name for c in table.clustering_key] == ["seq"]
        assert table.clustering_key[0].is_reversed
        assert table.columns["owner"].is_static
        assert table.columns["Payload"].cql_type == "blob"
        assert table.options["default_time_to_live"] == 60
        assert "WITH CLUSTERING ORDER BY (seq DESC)" in table.export_as_string()

        session.execute('DROP TABLE meta."Events"')
        assert "Events" not in cluster.metadata.keyspaces["meta"].tables
        session.execute("DROP KEYSPACE meta")
        assert "meta" not in cluster.metadata.keyspaces
    finally:
        cluster.shutdown()


def test_other_clients_learn_schema_changes_from_pushed_events(cql_server):
    watcher = connect_cluster(cql_server, schema_event_refresh_window=0)
    writer = connect_cluster(cql_server)
    try:
        watcher.connect()
        writer.connect().execute("CREATE KEYSPACE pushed WITH replication = "
                                 "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        deadline = time.monotonic() + 5
        while "pushed" not in watcher.metadata.keyspaces and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "pushed" in watcher.metadata.keyspaces
    finally:
        watcher.shutdown()
        writer.shutdown()


def test_prepared_statements_route_token_aware(cql_server):
    cluster = connect_cluster(cql_server)
    try:
        session = cluster.connect()
        session.execute("CREATE KEYSPACE r WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute("CREATE TABLE r.t (a text, b int, c int, v text, PRIMARY KEY ((a, b), c))")
        insert = session.prepare("INSERT INTO r.t (c, v, b, a) VALUES (?, ?, ?, ?)")
        assert insert.routing_key_indexes == [3, 2]
        select = session.prepare("SELECT v FROM r.t WHERE a = ? AND b = ? AND c > ?")
        assert select.routing_key_indexes == [0, 1]
        assert [c.name for c in select.column_metadata] == ["a", "b", "c"]
        assert select.result_metadata[0][2] == "v"
        bound = insert.bind((1, "x", 7, "key"))
        replicas = cluster.metadata.get_replicas("r", bound.routing_key)
        assert [h.endpoint.port for h in replicas] == [cql_server.port]
        future = session.execute_async(bound)
        future.result()
        assert future._current_host.endpoint.port == cql_server.port
        token_map = cluster.metadata.token_map
        assert token_map is not None
        assert len(token_map.ring) == 8
        # IN on the partition key cannot be routed: Cassandra reports no pk indexes.
        assert session.prepare("SELECT v FROM r.t WHERE a IN ? AND b = ?").routing_key_indexes is None
    finally:
        cluster.shutdown()


def test_password_authentication():
    with CqlServer(username="cassandra", password="s3cret") as server:
        good = Cluster(["127.0.0.1"], port=server.port,
                       auth_provider=PlainTextAuthProvider("cassandra", "s3cret"))
        try:
            assert good.connect().execute("SELECT key FROM system.local").one().key == "local"
        finally:
            good.shutdown()
        bad = Cluster(["127.0.0.1"], port=server.port, protocol_version=5,
                      auth_provider=PlainTextAuthProvider("cassandra", "wrong"))
        try:
            with pytest.raises(NoHostAvailable) as excinfo:
                bad.connect()
            (error,) = excinfo.value.errors.values()
            assert isinstance(error, AuthenticationFailed)
            assert "Provided username cassandra and/or password are incorrect" in str(error)
        finally:
            bad.shutdown()
        anonymous = Cluster(["127.0.0.1"], port=server.port, protocol_version=4)
        try:
            with pytest.raises(NoHostAvailable, match="requires authentication"):
                anonymous.connect()
        finally:
            anonymous.shutdown()


def test_use_keyspace_and_unknown_keyspace(cql_server):
    cluster = connect_cluster(cql_server)
    try:
        session = cluster.connect()
        session.execute("CREATE KEYSPACE IF NOT EXISTS u WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute("USE u")
        session.execute("CREATE TABLE t (k int PRIMARY KEY, v int)")
        session.execute(SimpleStatement("INSERT INTO t (k, v) VALUES (1, 2)"))
        assert cql_server.rows("u", "t") == [{"k": 1, "v": 2}]
        from cassandra import InvalidRequest

        with pytest.raises(InvalidRequest, match="Keyspace 'nope' does not exist"):
            session.execute("USE nope")
    finally:
        cluster.shutdown()


def test_standalone_main_serves_clients():
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tests.cqlserver", "--port", "0"], stdout=subprocess.PIPE,
                            text=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on 127.0.0.1:" in line
        port = int(line.split("127.0.0.1:")[1].split()[0])
        cluster = Cluster(["127.0.0.1"], port=port, protocol_version=5)
        try:
            assert cluster.connect().execute("SELECT key FROM system.local").one().key == "local"
        finally:
            cluster.shutdown()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
