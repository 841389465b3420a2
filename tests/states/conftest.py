"""Fixtures shared by the Cassandra fault and store tests: the CQL test server with no faults armed."""

from __future__ import annotations

import pytest

from states.cassandra import CassandraSettings
from tests.cqlserver import CqlServer
from tests.states.backends import cassandra_peer, cassandra_settings


@pytest.fixture
def server(request: pytest.FixtureRequest) -> CqlServer:
    """The CQL test server (fault injection needs its control API), faults cleared before and after."""
    srv = cassandra_peer(request, "cqlserver").server
    srv.clear_faults()
    request.addfinalizer(srv.clear_faults)  # noqa: PT021  a finalizer of an object made elsewhere
    return srv


@pytest.fixture
def settings(request: pytest.FixtureRequest, server: CqlServer) -> CassandraSettings:
    """Settings pointing at that server, in a keyspace of this test's own, tables with a partition per key: these
    tests count LWTs and reads per key (a sharded table's batches: test_cassandra_shards.py)."""
    return cassandra_settings(request, "cqlserver", shards=0)
