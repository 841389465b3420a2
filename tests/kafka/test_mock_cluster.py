"""The mock-cluster peer itself: its control API does what the failure tests rely on."""

from __future__ import annotations

import time
from typing import cast

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.kafka.fixtures import MockKafkaCluster, unique_topic
from tests.kafka.helpers import produce, spread


def _consumer(cluster: MockKafkaCluster, **extra: str) -> Consumer:
    return Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": "probe",
                     "enable.auto.commit": False, "enable.partition.eof": True, **extra})


def test_three_brokers_serve_a_created_topic(kafka_cluster: MockKafkaCluster) -> None:
    """A topic created through the control API has its partitions led by the cluster's three brokers."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 6)
    acked = produce(kafka_cluster.bootstrap_servers(), topic, spread(60, 6))
    c = _consumer(kafka_cluster)
    try:
        md = c.list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert sorted(md.topics[topic].partitions) == list(range(6))
        assert set(kafka_cluster.leaders(topic).values()) <= {1, 2, 3}
        assert [c.get_watermark_offsets(TopicPartition(topic, p), timeout=5) for p in range(6)] == [(0, 10)] * 6
    finally:
        c.close()
    assert len(acked) == 60


def test_broker_down_stops_fetching_until_up(kafka_cluster: MockKafkaCluster) -> None:
    """A broker set down serves nothing for the partitions it leads; set up again, the records arrive."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.set_leader(topic, 0, 2)
    produce(kafka_cluster.bootstrap_servers(), topic, spread(5, 1))
    kafka_cluster.broker_down(2)
    c = _consumer(kafka_cluster)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        assert [m for m in c.consume(10, timeout=1.5) if m.error() is None] == []
        kafka_cluster.broker_up(2)
        got: list[int] = []
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            got += [cast(int, m.offset()) for m in c.consume(10, timeout=0.5) if m.error() is None]
        assert got == [0, 1, 2, 3, 4]
    finally:
        c.close()


def test_set_leader_moves_and_removes_leadership(kafka_cluster: MockKafkaCluster) -> None:
    """``set_leader`` shows in metadata, and -1 leaves the partition without a leader."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 2)
    kafka_cluster.set_leader(topic, 0, 3)
    kafka_cluster.set_leader(topic, 1, -1)
    assert kafka_cluster.leaders(topic) == {0: 3, 1: -1}


def test_delete_records_moves_the_log_start(kafka_cluster: MockKafkaCluster) -> None:
    """Retention through the control API raises the low watermark; fetching below it is out of range."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, spread(20, 1))
    kafka_cluster.delete_records(topic, 0, 12)
    c = _consumer(kafka_cluster, **{"auto.offset.reset": "error"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5) == (12, 20)
        c.assign([TopicPartition(topic, 0, 3)])
        [first] = c.consume(1, timeout=5)
        error = first.error()
        assert error is not None
        assert "out of range" in error.str().lower()
    finally:
        c.close()


def test_pushed_request_errors_fail_the_next_requests(kafka_cluster: MockKafkaCluster) -> None:
    """Errors pushed for ListOffsets (api key 2) make the next watermark query fail, then it recovers."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 1)
    c = _consumer(kafka_cluster)
    try:
        c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        kafka_cluster.push_request_errors(2, 6, 6)  # NOT_LEADER_OR_FOLLOWER
        with pytest.raises(KafkaException, match="Not leader"):
            c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5) == (0, 0)
    finally:
        c.close()


def test_mock_gaps_still_hold(kafka_cluster: MockKafkaCluster) -> None:
    """The mock serves aborted records to read_committed consumers and has no timestamp lookup.

    If this fails after a librdkafka upgrade, the mock gained the feature: turn on the matching
    flag in ``fixtures.py`` (READ_COMMITTED / TIMESTAMP_LOOKUP) so the real assertions run on it.
    """
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 1)
    bootstrap = kafka_cluster.bootstrap_servers()
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx")})
    tx.init_transactions(10)
    tx.begin_transaction()
    tx.produce(topic, b"aborted", partition=0, timestamp=1_000_000)
    tx.flush(10)
    tx.abort_transaction(10)
    c = _consumer(kafka_cluster, **{"isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        values = [m.value() for m in c.consume(5, timeout=2) if m.error() is None]
        assert values == [b"aborted"]
        [tp] = c.offsets_for_times([TopicPartition(topic, 0, 1)], timeout=5)
        assert tp.offset == -1
    finally:
        c.close()
