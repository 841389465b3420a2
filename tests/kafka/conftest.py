from collections.abc import Iterator

import pytest

from spouts.kafka import POOL
from spouts.kafka.native import NATIVE_POOL
from tests.kafka.fixtures import kafka_cluster, kafka_peer  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _close_pooled_consumers() -> Iterator[None]:
    """Pooled consumers of one test must not outlive its (possibly destroyed) cluster."""
    yield
    POOL.close_all()
    NATIVE_POOL.close_all()
