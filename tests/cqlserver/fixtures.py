"""pytest fixtures for the CQL test server; import them from a conftest.py:

    from tests.cqlserver.fixtures import cql_server, cql_server_module  # noqa: F401
    # or: pytest_plugins = ["tests.cqlserver.fixtures"]

`cql_server` is function-scoped (fresh, empty node per test), `cql_server_module`
and `cql_server_session` are shared (call `truncate_all()` / `clear_faults()` /
`reset_counts()` as needed). `connect_cluster(server)` builds a driver Cluster
configured for the node (local DC, token-aware routing, explicit protocol version).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .server import CqlServer


def connect_cluster(server: CqlServer, **kwargs: Any) -> Any:
    """A `cassandra.cluster.Cluster` for `server` (not yet connected).

    Defaults: token-aware DC-aware routing with the server's data center, the
    server's highest protocol version (no downgrade warnings), short timeouts.
    Keyword arguments override `Cluster(...)` arguments; `profile=` overrides
    parts of the default execution profile (e.g. retry_policy).
    """
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    profile_args: dict[str, Any] = {
        "load_balancing_policy": TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=server.data_center)),
        "request_timeout": 10.0,
    }
    profile_args.update(kwargs.pop("profile", {}))
    options: dict[str, Any] = {
        "contact_points": [server.host],
        "port": server.port,
        "protocol_version": max(server.protocol_versions),
        "execution_profiles": {EXEC_PROFILE_DEFAULT: ExecutionProfile(**profile_args)},
        "connect_timeout": 5,
    }
    if server.username is not None and "auth_provider" not in kwargs:
        from cassandra.auth import PlainTextAuthProvider

        options["auth_provider"] = PlainTextAuthProvider(server.username, server.password)
    options.update(kwargs)
    return Cluster(**options)


def _started() -> Iterator[CqlServer]:
    server = CqlServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cql_server() -> Iterator[CqlServer]:
    """A started, empty server for one test."""
    yield from _started()


@pytest.fixture(scope="module")
def cql_server_module() -> Iterator[CqlServer]:
    """A started server shared by the tests of one module."""
    yield from _started()


@pytest.fixture(scope="session")
def cql_server_session() -> Iterator[CqlServer]:
    """A started server shared by the whole test session."""
    yield from _started()
