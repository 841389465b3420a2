"""Schema Registry peers for tests: the in-process test peer always, a real registry when
``SCHEMA_REGISTRY_URL`` names one (``SCHEMA_REGISTRY_USERNAME``/``_PASSWORD`` for basic auth);
absent, that parametrisation is SKIPPED with the reason (a failure under REQUIRE_REAL_PEERS=1).
Tests use their own subjects (unique topic names), so a real registry may be shared."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from spouts.kafka.formats import RegistrySettings
from tests.peers import RealPeer, missing_peer
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


@pytest.fixture(scope="session", params=["peer", "env"])
def schema_registry(request: pytest.FixtureRequest, registry_server: SchemaRegistryServer) -> RegistrySettings:
    """Settings of each available registry in turn: the test peer, then SCHEMA_REGISTRY_URL's."""
    if request.param == "peer":
        return RegistrySettings(registry_server.url)
    settings = env_registry()
    if settings is None:
        missing_peer(REAL_SCHEMA_REGISTRY, "real Schema Registry: SCHEMA_REGISTRY_URL is not set")
    return settings
