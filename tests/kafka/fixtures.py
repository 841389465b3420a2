"""Kafka test peers and their pytest fixtures (import them in a conftest to use them elsewhere).

* ``kafka_cluster``: a fresh :class:`MockKafkaCluster` (3 brokers) per test, for failure control.
* ``kafka_peer``: one peer for behaviour that must hold on any Kafka, the most real one available:
  the cluster named by ``KAFKA_BOOTSTRAP_SERVERS`` (topics created with ``KAFKA_REPLICATION_FACTOR``,
  default 1; the cluster must allow topic creation and DeleteRecords), else ``testcontainers`` Kafka
  when a Docker engine answers, else the mock. A real run proves all a mock run would, so the mock
  does not repeat it; under REQUIRE_REAL_PEERS=1 no real Kafka is a failure, never a mock run.
  What only the mock can do (faults, leaderless partitions, a broker down) uses ``kafka_cluster``.
  Peers share :class:`KafkaPeer`; the flags say what the peer implements.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import NoReturn, Protocol

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.peers import REAL_KAFKA, docker_problem, missing_peer, real_peers_required

__all__ = ["KafkaPeer", "MockKafkaCluster", "RealKafkaPeer", "kafka_cluster", "kafka_peer", "real_kafka_available",
           "skip_mock_gap", "unique_topic"]


class KafkaPeer(Protocol):
    kind: str  # "mock" or "real"

    def bootstrap_servers(self) -> str: ...

    def create_topic(self, name: str, partitions: int, replication: int = ...) -> None: ...

    def delete_topic(self, name: str) -> None: ...

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None: ...

    def close(self) -> None: ...


# What each kind of peer implements beyond the basics (the mock's gaps: see mock_cluster.py).
READ_COMMITTED = {"mock": False, "real": True}
TIMESTAMP_LOOKUP = {"mock": False, "real": True}


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class RealKafkaPeer:
    """A real Kafka cluster, administered through the Admin API."""

    kind = "real"

    def __init__(self, bootstrap: str, replication: int = 1) -> None:
        self._bootstrap, self._replication = bootstrap, replication
        self._admin = AdminClient({"bootstrap.servers": bootstrap})

    def bootstrap_servers(self) -> str:
        return self._bootstrap

    def create_topic(self, name: str, partitions: int, replication: int = 0) -> None:
        """Create the topic and wait until every partition has a leader (creation is asynchronous in Kafka)."""
        rf = min(replication, self._replication) if replication else self._replication
        for f in self._admin.create_topics([NewTopic(name, partitions, rf)], request_timeout=30).values():
            f.result()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = self._admin.list_topics(name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions \
                    and all(p.leader >= 0 for p in md.partitions.values()):
                return
            time.sleep(0.1)
        raise TimeoutError(f"topic {name} has no leaders after 30s")

    def delete_topic(self, name: str) -> None:
        for f in self._admin.delete_topics([name], request_timeout=30).values():
            f.result()

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        for f in self._admin.delete_records([TopicPartition(topic, partition, before_offset)],
                                            request_timeout=30).values():
            f.result()

    def close(self) -> None:
        pass


def real_kafka_available() -> bool:
    """A real Kafka is reachable here: named by KAFKA_BOOTSTRAP_SERVERS, or startable by testcontainers."""
    return bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")) or docker_problem() is None


def skip_mock_gap(reason: str) -> NoReturn:
    """Skip a check the mock cannot answer; the real peers run it (REQUIRE_REAL_PEERS=1 demands one)."""
    missing_peer(REAL_KAFKA, reason, covered=real_kafka_available())


def _testcontainers_peer() -> Iterator[RealKafkaPeer]:
    try:
        from testcontainers.community.kafka import KafkaContainer
    except ImportError:  # testcontainers < 4.10 keeps it at the old path
        from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as container:
        yield RealKafkaPeer(container.get_bootstrap_server())


@pytest.fixture(scope="session")
def kafka_peer() -> Iterator[KafkaPeer]:
    """The one Kafka of the behaviour tests (session-scoped; tests use their own topics): the real one when
    this run has one, else the mock (a failure instead under REQUIRE_REAL_PEERS=1)."""
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield RealKafkaPeer(bootstrap, int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1")))
    elif docker_problem() is None:
        yield from _testcontainers_peer()
    else:
        if real_peers_required():
            missing_peer(REAL_KAFKA, f"KAFKA_BOOTSTRAP_SERVERS is not set and no Docker engine answers for "
                                     f"testcontainers ({docker_problem()})")
        with MockKafkaCluster(3) as cluster:
            yield cluster


@pytest.fixture
def kafka_cluster() -> Iterator[MockKafkaCluster]:
    """A fresh 3-broker mock cluster for one test (failure control needs the mock's control API)."""
    with MockKafkaCluster(3) as cluster:
        yield cluster
