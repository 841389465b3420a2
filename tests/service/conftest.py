from collections.abc import Iterator

import pytest

from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster


@pytest.fixture
def kafka() -> Iterator[MockKafkaCluster]:
    """A 3-broker mock Kafka in the test process; the service subprocess and its Spark workers reach it on loopback."""
    with MockKafkaCluster(3) as cluster:
        yield cluster
        POOL.close_all()
