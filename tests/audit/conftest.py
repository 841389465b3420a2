from collections.abc import Iterator

import pytest

from spouts.kafka import POOL
from tests.kafka.fixtures import kafka_peer  # noqa: F401  (fixtures)


@pytest.fixture(autouse=True)
def _close_pooled_consumers() -> Iterator[None]:
    yield
    POOL.close_all()
