"""Shared peers of the Spark tests: one SparkSession (``local[2,4]``), one mock Kafka cluster, one CQL server.

Spark's Python workers outlive tests and keep their pooled Kafka consumers and Cassandra sessions
(that is the point of the pools), so the peers they talk to live for the whole session; tests
isolate themselves with their own topics, topology ids, SQLite files and keyspaces.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.cqlserver.fixtures import cql_server_session  # noqa: F401  (fixture)
from tests.kafka.fixtures import RealKafkaPeer
from tests.peers import REAL_KAFKA, missing_peer


@pytest.fixture(scope="session")
def spark_kafka() -> Iterator[MockKafkaCluster]:
    """A 3-broker mock Kafka cluster for every Spark test (each test makes its own topic)."""
    from spouts.kafka import POOL

    with MockKafkaCluster(3) as cluster:
        yield cluster
        POOL.close_all()  # the driver's planning consumers must not outlive the cluster


@pytest.fixture(scope="session")
def spark(spark_kafka: MockKafkaCluster) -> Iterator[Any]:
    """The session's SparkSession: 2 threads, 4 attempts per task (stopped before the Kafka peer)."""
    from app.spark import spark_session

    session = spark_session("local[2,4]", app_name="trident-tests")
    if session.sparkContext.master != "local[2,4]":  # another test's session is still running: ours differs
        session.stop()
        session = spark_session("local[2,4]", app_name="trident-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def real_kafka() -> RealKafkaPeer:
    """The real Kafka of KAFKA_BOOTSTRAP_SERVERS (absent: skipped with the reason, a failure under REQUIRE_REAL_PEERS=1)."""
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        missing_peer(REAL_KAFKA, "real Kafka: KAFKA_BOOTSTRAP_SERVERS is not set")
    return RealKafkaPeer(bootstrap, int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1")))
