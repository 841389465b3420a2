"""The coordinator side: partition discovery (lists, patterns, refresh interval) and monitoring offsets."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from spouts.kafka import KafkaCoordinator, KafkaSpout, KafkaSpoutConfig
from spouts.kafka.discovery import select_topics
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from tests.kafka.fixtures import KafkaPeer, MockKafkaCluster, unique_topic
from tests.kafka.helpers import config, parts, produce, spread


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_select_topics_by_list_or_whole_name_pattern() -> None:
    """Listed topics are kept if present; a pattern must match the whole name and never matches __internal topics."""
    available = ["orders", "orders-eu", "pre-orders", "__consumer_offsets", "payments"]
    listed = KafkaSpoutConfig("b:9092", topics=("orders", "missing", "payments"))
    assert select_topics(listed, available) == ["orders", "payments"]
    pattern = KafkaSpoutConfig("b:9092", topic_pattern=r"orders.*|_.*")
    assert select_topics(pattern, available) == ["orders", "orders-eu"]


def test_listed_topics_discover_all_their_partitions(kafka_peer: KafkaPeer) -> None:
    """A topic list yields every partition of every listed topic that exists, sorted."""
    a, b = unique_topic("a"), unique_topic("b")
    kafka_peer.create_topic(a, 3)
    kafka_peer.create_topic(b, 2)
    coord = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[b, a, unique_topic("absent")]), "t").coordinator()
    try:
        assert coord.partitions() == sorted(parts(a, 3) + parts(b, 2))
    finally:
        coord.close()


def test_pattern_discovers_a_topic_created_mid_run_after_the_interval(kafka_peer: KafkaPeer) -> None:
    """A matching topic created later joins at the first refresh after discovery_interval_s, not before."""
    prefix = unique_topic("rx")
    kafka_peer.create_topic(f"{prefix}-one", 2)
    kafka_peer.create_topic(unique_topic("other"), 1)
    clock = FakeClock()
    coord = KafkaCoordinator(config(kafka_peer.bootstrap_servers(), topic_pattern=rf"{prefix}-.*",
                                    discovery_interval_s=60), "t", clock=clock)
    try:
        assert coord.partitions() == parts(f"{prefix}-one", 2)
        kafka_peer.create_topic(f"{prefix}-two", 1)
        clock.now = 59
        assert coord.partitions() == parts(f"{prefix}-one", 2)  # cached within the interval
        clock.now = 60
        deadline = time.monotonic() + 10
        while len(coord.partitions()) < 3 and time.monotonic() < deadline:
            clock.now += 60
        assert coord.partitions() == [*parts(f"{prefix}-one", 2), Partition(f"{prefix}-two", 0)]
    finally:
        coord.close()


def test_deleted_topic_leaves_and_a_recreated_one_brings_its_partitions(kafka_cluster: MockKafkaCluster) -> None:
    """Deleting a topic removes its partitions; recreating it with more partitions makes them all join."""
    prefix = unique_topic("del")
    kafka_cluster.create_topic(f"{prefix}-a", 1)
    kafka_cluster.create_topic(f"{prefix}-b", 2)
    coord = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topic_pattern=rf"{prefix}-.*"), "t").coordinator()
    try:
        assert len(coord.partitions()) == 3
        kafka_cluster.delete_topic(f"{prefix}-a")
        assert coord.partitions() == parts(f"{prefix}-b", 2)
        kafka_cluster.delete_topic(f"{prefix}-b")
        kafka_cluster.create_topic(f"{prefix}-b", 4)
        assert coord.partitions() == parts(f"{prefix}-b", 4)
    finally:
        coord.close()


def test_discovery_keeps_known_partitions_when_the_cluster_is_unreachable(kafka_cluster: MockKafkaCluster) -> None:
    """With every broker down, discovery logs and keeps what it knew instead of dropping all partitions."""
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 2)
    coord = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topics=[topic], request_timeout_s=0.5), "t").coordinator()
    try:
        assert coord.partitions() == parts(topic, 2)
        for b in kafka_cluster.broker_ids:
            kafka_cluster.broker_down(b)
        assert coord.partitions() == parts(topic, 2)
    finally:
        coord.close()


def test_committed_offsets_are_visible_to_consumer_group_tools(kafka_peer: KafkaPeer) -> None:
    """committed(plan) publishes each partition's next offset to group trident-<topology>, readable by AdminClient."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    coord = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "topo-mon").coordinator()
    produce(kafka_peer.bootstrap_servers(), topic, spread(20, 2))
    plan = BatchPlan(7, {Partition(topic, 0): PartitionMetadata(topic, 0, 0, 3, 3, "topo-mon"),
                         Partition(topic, 1): PartitionMetadata(topic, 1, 0, 5, 5, "topo-mon")})
    later = BatchPlan(8, {Partition(topic, 1): PartitionMetadata(topic, 1, 5, 8, 3, "topo-mon")})
    try:
        coord.committed(plan)
        coord.committed(later)
        assert coord.flush(20)
    finally:
        coord.close()
    admin = AdminClient({"bootstrap.servers": kafka_peer.bootstrap_servers()})
    request = ConsumerGroupTopicPartitions("trident-topo-mon", [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    [future] = admin.list_consumer_group_offsets([request], request_timeout=20).values()
    assert {tp.partition: tp.offset for tp in future.result().topic_partitions} == {0: 3, 1: 8}


def test_committed_offsets_use_the_configured_group_and_latest_plan(kafka_peer: KafkaPeer) -> None:
    """A configured group_id receives the latest next offsets of every partition seen in committed plans."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    produce(kafka_peer.bootstrap_servers(), topic, spread(20, 2))
    group = unique_topic("group")
    coord = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic], group_id=group), "t").coordinator()
    m = {p: PartitionMetadata(topic, p, 0, 4 + p, 4 + p, "t") for p in range(2)}
    try:
        coord.committed(BatchPlan(1, {Partition(topic, p): m[p] for p in range(2)}))
        coord.committed(BatchPlan(2, {Partition(topic, 0): PartitionMetadata(topic, 0, 4, 9, 5, "t")}))
        assert coord.flush(20)
    finally:
        coord.close()
    admin = AdminClient({"bootstrap.servers": kafka_peer.bootstrap_servers()})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    [future] = admin.list_consumer_group_offsets([request], request_timeout=20).values()
    assert {tp.partition: tp.offset for tp in future.result().topic_partitions} == {0: 9, 1: 5}


@pytest.mark.parametrize("interval", [0.0, 3600.0])
def test_refresh_forces_discovery_regardless_of_interval(kafka_cluster: MockKafkaCluster, interval: float) -> None:
    """refresh() reads metadata now, whatever the interval."""
    prefix = unique_topic("rf")
    kafka_cluster.create_topic(f"{prefix}-1", 1)
    coord = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topic_pattern=rf"{prefix}-\d",
                              discovery_interval_s=interval), "t").coordinator()
    try:
        assert len(coord.partitions()) == 1
        kafka_cluster.create_topic(f"{prefix}-2", 1)
        assert len(coord.refresh()) == 2
    finally:
        coord.close()
