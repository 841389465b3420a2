"""The backends the contract suites run against: adding one is one line in each table below.

A backing-map factory takes the map's spec and the pytest request (for fixtures such as a
temporary directory or a CQL server) and returns a :class:`Backend`: the map, and a way to open
a second instance over the same storage (None when not durable).
A store factory returns a :class:`StoreHarness`: the store, a second instance over the same
storage, and a function that makes the current lease expire.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from states.cassandra.settings import Secret
from states.memory import MemoryBackingMap, MemoryTransactionalStateStore
from states.spec import MapSpec
from states.sqlite import SqliteBackingMap, SqliteTransactionalStateStore
from tests.peers import REAL_CASSANDRA, cassandra_from_env, docker_problem, missing_peer, real_peers_required


@dataclass
class Backend:
    map: Any
    reopen: Callable[[], Any] | None = None


@dataclass
class StoreHarness:
    store: Any
    reopen: Callable[[], Any]
    expire_lease: Callable[[], None]


def memory_map(spec: MapSpec, request: pytest.FixtureRequest) -> Backend:
    return Backend(MemoryBackingMap())


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def memory_store(topology_id: str, request: pytest.FixtureRequest) -> StoreHarness:
    clock = FakeClock()
    store = MemoryTransactionalStateStore(topology_id, clock=clock)

    def expire() -> None:
        clock.now += 10_000

    return StoreHarness(store, lambda: store, expire)


def sqlite_map(spec: MapSpec, request: pytest.FixtureRequest) -> Backend:
    path = request.getfixturevalue("tmp_path") / "state.db"
    opened = [SqliteBackingMap(path, spec)]

    def reopen() -> SqliteBackingMap:
        opened.append(SqliteBackingMap(path, spec))
        return opened[-1]

    request.addfinalizer(lambda: _close_all(opened))
    return Backend(opened[0], reopen)


def sqlite_store(topology_id: str, request: pytest.FixtureRequest) -> StoreHarness:
    path, clock = request.getfixturevalue("tmp_path") / "state.db", FakeClock()
    opened = [SqliteTransactionalStateStore(path, topology_id, clock=clock)]

    def reopen() -> SqliteTransactionalStateStore:
        opened.append(SqliteTransactionalStateStore(path, topology_id, clock=clock))
        return opened[-1]

    def expire() -> None:
        clock.now += 10_000

    request.addfinalizer(lambda: _close_all(opened))
    return StoreHarness(opened[0], reopen, expire)


# Cassandra peers: the CQL test server always; a real Cassandra named by CASSANDRA_CONTACT_POINTS
# (host[:port],... with CASSANDRA_PORT as the default port; optional CASSANDRA_LOCAL_DC, CASSANDRA_USERNAME, CASSANDRA_PASSWORD,
# CASSANDRA_PROTOCOL_VERSION), else started by testcontainers when a Docker engine answers.
# Behaviour tests take the real peer when there is one, else the CQL test server (behaviour_kind);
# fault injection, server clocks and request counts take the CQL test server. A test that needs
# the real peer and has none is reported SKIPPED with the reason, never passed (a failure under
# REQUIRE_REAL_PEERS=1). Each test gets its own keyspace (dropped afterwards); peers and sessions
# live for the whole pytest process.


@dataclass
class CassandraPeer:
    kind: str  # "cqlserver" or "real"
    base: Any  # CassandraSettings without a keyspace of its own
    server: Any = None  # the CqlServer, for faults, clocks and request counts (None when real)

    def settings(self, keyspace: str, **overrides: Any) -> Any:
        return replace(self.base, keyspace=keyspace, **overrides)


_PEERS: dict[str, CassandraPeer | str] = {}  # kind -> peer, or the reason it is unavailable


def cassandra_peer(request: pytest.FixtureRequest, kind: str) -> CassandraPeer:
    """The process-wide peer of ``kind`` ("cqlserver" or "real"), started on first use; skips if absent."""
    if kind not in _PEERS:
        _PEERS[kind] = _start_peer(request.config, kind)
    peer = _PEERS[kind]
    if isinstance(peer, str):
        missing_peer(REAL_CASSANDRA, peer)
    return peer


def behaviour_kind(request: pytest.FixtureRequest) -> str:
    """The Cassandra for behaviour that must hold on any Cassandra: "real" when this run has one (it proves all
    the CQL test server would), else "cqlserver"; under REQUIRE_REAL_PEERS=1 an absent real one fails the test."""
    if "real" not in _PEERS:
        _PEERS["real"] = _start_peer(request.config, "real")
    return "cqlserver" if isinstance(_PEERS["real"], str) and not real_peers_required() else "real"


def close_shared_clients() -> None:
    """Shut down this process's shared Cassandra clients before the peer stops (the service never closes
    them: they live as long as its process)."""
    from states.cassandra import session

    with session._shared_lock:
        clients = [c for (_, pid), c in session._shared.items() if pid == os.getpid()]
        session._shared.clear()
    for c in clients:
        c.close()


def _start_peer(config: pytest.Config, kind: str) -> CassandraPeer | str:
    from states.cassandra.settings import CassandraSettings

    if kind == "cqlserver":
        from tests.cqlserver import CqlServer

        server = CqlServer().start()
        config.add_cleanup(server.stop)
        config.add_cleanup(close_shared_clients)  # cleanups run last-in first-out: sessions first
        return CassandraPeer(kind, CassandraSettings(contact_points=(server.host,), port=server.port,
                                                     local_dc=server.data_center,
                                                     protocol_version=max(server.protocol_versions),
                                                     backoff_initial_s=0.02, backoff_max_s=0.5, max_retries=8,
                                                     reconnect_base_s=0.05, reconnect_max_s=0.5), server)
    if (named := cassandra_from_env()) is not None:
        hosts, port = named
        password = os.environ.get("CASSANDRA_PASSWORD")
        version = os.environ.get("CASSANDRA_PROTOCOL_VERSION")
        config.add_cleanup(close_shared_clients)
        return CassandraPeer(kind, CassandraSettings(
            contact_points=hosts, port=port,
            local_dc=os.environ.get("CASSANDRA_LOCAL_DC"), username=os.environ.get("CASSANDRA_USERNAME"),
            password=Secret(password) if password else None, protocol_version=int(version) if version else None))
    if (problem := docker_problem()) is not None:
        return (f"real Cassandra: CASSANDRA_CONTACT_POINTS is not set and no Docker engine answers for "
                f"testcontainers ({problem})")
    from testcontainers.community.cassandra import CassandraContainer

    container = CassandraContainer("cassandra:4.1").start()
    config.add_cleanup(container.stop)
    config.add_cleanup(close_shared_clients)
    (host, port), = container.get_contact_points()
    return CassandraPeer(kind, CassandraSettings(contact_points=(host,), port=port,
                                                 local_dc=container.get_local_datacenter(), protocol_version=5))


def cassandra_settings(request: pytest.FixtureRequest, kind: str, **overrides: Any) -> Any:
    """Settings for a fresh keyspace on the ``kind`` peer; the keyspace is dropped after the test."""
    from states.cassandra.session import shared_client

    settings = cassandra_peer(request, kind).settings(f"t_{uuid.uuid4().hex[:16]}", **overrides)
    request.addfinalizer(lambda: shared_client(settings).session.execute(
        f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=60))
    return settings


def cassandra_map(spec: MapSpec, request: pytest.FixtureRequest, kind: str = "cqlserver", shards: int = 0) -> Backend:
    from states.cassandra import CassandraBackingMap

    settings = cassandra_settings(request, kind, shards=shards)
    return Backend(CassandraBackingMap(settings, spec), lambda: CassandraBackingMap(settings, spec))


def cassandra_store(topology_id: str, request: pytest.FixtureRequest, kind: str = "cqlserver") -> StoreHarness:
    from states.cassandra import CassandraTransactionalStateStore

    settings = cassandra_settings(request, kind)
    store = CassandraTransactionalStateStore(settings, topology_id)
    peer = cassandra_peer(request, kind)

    def expire() -> None:
        if peer.server is not None:
            peer.server.advance_clock(10_000)  # the owner cell's TTL runs out on the server's clock
        else:  # a real cluster's clock can't be moved: remove the TTL'd cell, which is what expiry does
            store.client.session.execute(f"UPDATE {settings.keyspace}.{store.table} SET owner = null "
                                         f"WHERE topology = %s", (topology_id,))

    return StoreHarness(store, lambda: CassandraTransactionalStateStore(settings, topology_id), expire)


BACKING_MAPS: dict[str, Callable[[MapSpec, pytest.FixtureRequest], Backend]] = {
    "memory": memory_map,
    "sqlite": sqlite_map,
    "cassandra": lambda spec, request: cassandra_map(spec, request, behaviour_kind(request)),
    # keys in 3 shards: a compare-and-set of many keys is one conditional batch per shard
    "cassandra_sharded": lambda spec, request: cassandra_map(spec, request, behaviour_kind(request), shards=3),
}

STORES: dict[str, Callable[[str, pytest.FixtureRequest], StoreHarness]] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "cassandra": lambda topology_id, request: cassandra_store(topology_id, request, behaviour_kind(request)),
}


def _close_all(opened: Sequence[Any]) -> None:
    """Close every map or store a test opened."""
    for o in opened:
        o.close()
