"""Suite-wide hooks: what counts as slow, and whether absent real peers fail the run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.peers import REQUIRE_REAL_PEERS, real_peers_required

# Fixtures that start a JVM: every test using one is a Spark end-to-end test, hence slow.
SPARK_FIXTURES = frozenset({"spark"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs a SparkSession ``slow`` (kill and service-run tests carry the mark themselves)."""
    for item in items:
        if SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_report_header(config: pytest.Config) -> str:
    if real_peers_required():
        return f"{REQUIRE_REAL_PEERS}=1: an absent real Kafka or Cassandra fails the tests that need it"
    return f"real peers optional: tests needing an absent one are skipped ({REQUIRE_REAL_PEERS}=1 makes them fail)"


def pytest_configure(config: pytest.Config) -> None:
    """``RANGEREAD_LIBRARY``: the native reader's tests run that build of it (``make test-native-sanitized``)."""
    library = os.environ.get("RANGEREAD_LIBRARY")
    if library:
        from spouts.kafka import native

        native.LIBRARY = Path(library)
