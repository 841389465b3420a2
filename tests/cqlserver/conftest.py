"""Fixtures for the cqlserver's own tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .fixtures import connect_cluster, cql_server, cql_server_module  # noqa: F401
from .server import CqlServer


@pytest.fixture(scope="module")
def shared_cluster(cql_server_module: CqlServer) -> Iterator[Any]:
    cluster = connect_cluster(cql_server_module)
    yield cluster
    cluster.shutdown()


@pytest.fixture(scope="module")
def session(shared_cluster: Any, cql_server_module: CqlServer) -> Iterator[Any]:
    """Module-wide session with keyspace `ks` (SimpleStrategy, RF 1)."""
    s = shared_cluster.connect()
    s.execute("CREATE KEYSPACE IF NOT EXISTS ks WITH replication = "
              "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    s.set_keyspace("ks")
    return s


@pytest.fixture
def server(cql_server_module: CqlServer) -> Iterator[CqlServer]:
    """The module's server with counters and faults reset around each test."""
    cql_server_module.clear_faults()
    cql_server_module.reset_counts()
    yield cql_server_module
    cql_server_module.clear_faults()
