"""Wire-level behaviour, with responses decoded by the driver's own protocol handler."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest
from cassandra import ConsistencyLevel
from cassandra.cluster import NoHostAvailable
from cassandra.policies import ConstantReconnectionPolicy
from cassandra.protocol import (
    ErrorMessage,
    OptionsMessage,
    PreparedQueryNotFound,
    PrepareMessage,
    ProtocolException,
    ResultMessage,
    StartupMessage,
    SupportedMessage,
    _ProtocolHandler,
)

from tests.cqlserver import CqlServer
from tests.cqlserver.fixtures import connect_cluster
from tests.cqlserver.wire import Writer


class RawClient:
    """Minimal v4 client: driver encoder for standard messages, hand-built bodies otherwise."""

    def __init__(self, port: int, version: int = 4) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.version = version

    def send_raw(self, opcode: int, body: bytes, stream: int = 1, version: int | None = None,
                 result_metadata: Any = None) -> Any:
        self.sock.sendall(struct.pack(">BBhBi", version or self.version, 0, stream, opcode, len(body)) + body)
        return self.read(result_metadata)

    def send(self, msg: Any, stream: int = 1) -> Any:
        self.sock.sendall(_ProtocolHandler.encode_message(msg, stream, self.version, None, False))
        return self.read()

    def read(self, result_metadata: Any = None) -> Any:
        header = self._exact(9)
        version, flags, stream, opcode, length = struct.unpack(">BBhBi", header)
        body = self._exact(length)
        return _ProtocolHandler.decode_message(version & 0x7F, {}, stream, flags, opcode, body, None,
                                               result_metadata)

    def _exact(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(cql_server):
    client = RawClient(cql_server.port)
    assert isinstance(client.send(OptionsMessage()), SupportedMessage)
    client.send(StartupMessage(cqlversion="3.4.6", options={}))
    yield client
    client.close()


def test_supported_options_and_bad_version(cql_server):
    client = RawClient(cql_server.port, version=3)
    reply = client.send_raw(0x05, b"", stream=9)
    assert isinstance(reply, ProtocolException)
    assert reply.stream_id == 9
    assert "Invalid or unsupported protocol version (3)" in reply.message
    client.close()
    supported = RawClient(cql_server.port).send(OptionsMessage())
    assert supported.cql_versions == ["3.4.6"]
    assert supported.options["PROTOCOL_VERSIONS"] == ["4/v4", "5/v5"]
    assert supported.options["COMPRESSION"] == []


def test_query_before_startup_is_a_protocol_error(cql_server):
    client = RawClient(cql_server.port)
    body = Writer().long_string("SELECT * FROM system.local").short(1).byte(0).getvalue()
    reply = client.send_raw(0x07, body)
    assert isinstance(reply, ProtocolException)
    assert "expecting STARTUP" in reply.message


def test_execute_with_skip_metadata_and_unknown_id(raw):
    prepared = raw.send(PrepareMessage("SELECT key, cluster_name FROM system.local WHERE key = ?"))
    assert isinstance(prepared, ResultMessage)
    assert prepared.pk_indexes == [0]
    def execute(flags: int) -> Any:
        body = (Writer().short_bytes(prepared.query_id).short(ConsistencyLevel.ONE).byte(flags)
                .short(1).bytes(b"local").getvalue())
        return raw.send_raw(0x0A, body)
    full = execute(0x01)
    assert full.column_names == ["key", "cluster_name"]
    assert full.parsed_rows == [("local", "Test Cluster")]
    skipped = raw.send_raw(0x0A, Writer().short_bytes(prepared.query_id).short(1).byte(0x03).short(1)
                           .bytes(b"local").getvalue(), result_metadata=prepared.column_metadata)
    assert skipped.column_metadata is None  # NO_METADATA: decoded with the prepared metadata instead
    assert skipped.parsed_rows == [("local", "Test Cluster")]
    unknown = raw.send_raw(0x0A, Writer().short_bytes(b"\x01" * 16).short(1).byte(0).getvalue())
    assert isinstance(unknown, PreparedQueryNotFound)
    assert unknown.info == b"\x01" * 16


def test_query_with_named_values(raw):
    body = (Writer().long_string("SELECT cluster_name FROM system.local WHERE key = :k").short(1)
            .byte(0x01 | 0x40).short(1).string("k").bytes(b"local").getvalue())
    assert raw.send_raw(0x07, body).parsed_rows == [("Test Cluster",)]


def test_restart_keeps_port_data_and_prepared_statements(cql_server):
    cluster = connect_cluster(cql_server, reconnection_policy=ConstantReconnectionPolicy(0.05, None))
    try:
        session = cluster.connect()
        session.execute("CREATE KEYSPACE rs WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute("CREATE TABLE rs.t (k int PRIMARY KEY, v int)")
        insert = session.prepare("INSERT INTO rs.t (k, v) VALUES (?, ?)")
        session.execute(insert, (1, 1))
        port = cql_server.port
        cql_server.stop()
        cql_server.start()
        assert cql_server.port == port
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                session.execute(insert, (2, 2))
                break
            except NoHostAvailable:
                time.sleep(0.02)
        assert [r["k"] for r in cql_server.rows("rs", "t")] == [1, 2]
    finally:
        cluster.shutdown()


def test_driver_reprepares_after_server_forgets_statements(cql_server):
    cluster = connect_cluster(cql_server)
    try:
        session = cluster.connect()
        stmt = session.prepare("SELECT cluster_name FROM system.local WHERE key = ?")
        cql_server.engine.prepared.clear()  # as after a node restart
        assert session.execute(stmt, ("local",)).one().cluster_name == "Test Cluster"
        assert cql_server.request_count("PREPARE", include_system=True) == 2
    finally:
        cluster.shutdown()


def test_concurrent_cas_increments_are_linearizable(cql_server):
    cluster = connect_cluster(cql_server)
    try:
        session = cluster.connect()
        session.execute("CREATE KEYSPACE c WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute("CREATE TABLE c.counter (k int PRIMARY KEY, n bigint)")
        session.execute("INSERT INTO c.counter (k, n) VALUES (1, 0)")
        cas = session.prepare("UPDATE c.counter SET n = ? WHERE k = 1 IF n = ?")
        read = session.prepare("SELECT n FROM c.counter WHERE k = 1")
        read.consistency_level = ConsistencyLevel.SERIAL
        conflicts = []

        def worker() -> None:
            for _ in range(10):
                while True:
                    current = session.execute(read).one().n
                    result = session.execute(cas, (current + 1, current))
                    if result.was_applied:
                        break
                    conflicts.append(result.one().n)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert session.execute(read).one().n == 40
        assert all(isinstance(n, int) for n in conflicts)
    finally:
        cluster.shutdown()


def test_server_survives_garbage_bytes(cql_server):
    sock = socket.create_connection(("127.0.0.1", cql_server.port), timeout=5)
    sock.sendall(b"\x04\x00\x00\x01\x07\xff\xff\xff\xff")  # negative body length
    data = sock.recv(1024)
    sock.close()
    assert data[4] == 0x00  # an ERROR frame came back before the close
    with CqlServer() as other:
        assert other.port != cql_server.port
    cluster = connect_cluster(cql_server)
    try:
        assert cluster.connect().execute("SELECT key FROM system.local").one().key == "local"
    finally:
        cluster.shutdown()


def test_error_message_class_names():
    # Guard: the exception classes used above are the ones the driver maps error codes to.
    assert PreparedQueryNotFound.error_code == 0x2500
    assert issubclass(ProtocolException, ErrorMessage)
