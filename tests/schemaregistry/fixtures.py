"""Schema Registry peers for tests: the in-process test peer, and a real registry when
``SCHEMA_REGISTRY_URL`` names one (``SCHEMA_REGISTRY_USERNAME``/``_PASSWORD`` for basic auth).
``schema_registry`` is one of them: the real one when set (it proves all the test peer would),
else the test peer (a failure instead under REQUIRE_REAL_PEERS=1). Tests use their own subjects
(unique topic names), so a real registry may be shared."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from spouts.kafka.formats import RegistrySettings
from tests.peers import RealPeer, missing_peer, real_peers_required
from tests.schemaregistry.server import SchemaRegistryServer

REAL_SCHEMA_REGISTRY = RealPeer("a real Schema Registry", "set SCHEMA_REGISTRY_URL")


def env_registry() -> RegistrySettings | None:
    url = os.environ.get("SCHEMA_REGISTRY_URL")
    if not url:
        return None
    user = os.environ.get("SCHEMA_REGISTRY_USERNAME")
    return RegistrySettings(url, user, os.environ.get("SCHEMA_REGISTRY_PASSWORD") if user else None)


@pytest.fixture(scope="session")
def registry_server() -> Iterator[SchemaRegistryServer]:
    """The test peer, for tests that look at what it served."""
    with SchemaRegistryServer() as server:
        yield server


def registry_settings(kind: str, server: SchemaRegistryServer) -> RegistrySettings:
    """Settings of the test peer (``peer``) or of SCHEMA_REGISTRY_URL's registry (``env``, skipped when unset)."""
    if kind == "peer":
        return RegistrySettings(server.url)
    settings = env_registry()
    if settings is None:
        missing_peer(REAL_SCHEMA_REGISTRY, "real Schema Registry: SCHEMA_REGISTRY_URL is not set")
    return settings


@pytest.fixture(scope="session")
def schema_registry(request: pytest.FixtureRequest) -> RegistrySettings:
    """Settings of SCHEMA_REGISTRY_URL's registry when set, else of the test peer (unless real peers are required)."""
    if (settings := env_registry()) is not None:
        return settings
    if real_peers_required():
        missing_peer(REAL_SCHEMA_REGISTRY, "real Schema Registry: SCHEMA_REGISTRY_URL is not set")
    return RegistrySettings(request.getfixturevalue("registry_server").url)
