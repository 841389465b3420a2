"""Nothing goes wrong silently: missing topics, skipped partitions, unreachable brokers, retention in a frozen txid."""

from __future__ import annotations

import logging
import math

import pytest
from prometheus_client import CollectorRegistry

from app.failures.policy import BAD_INPUT, Failure, FailurePolicy
from spouts.errors import DataLossError, SourceUnavailableError
from spouts.kafka import KafkaCoordinator, KafkaSpout
from spouts.metadata import Partition, PartitionMetadata
from spouts.metrics import SpoutMetrics
from spouts.protocols import DataLossPolicy
from tests.kafka.fixtures import MockKafkaCluster, unique_topic
from tests.kafka.helpers import config, produce, spread


def _topic(cluster: MockKafkaCluster, n: int = 30, partitions: int = 3) -> str:
    topic = unique_topic()
    cluster.create_topic(topic, partitions)
    for p in range(partitions):
        cluster.set_leader(topic, p, p + 1)  # partition p led by broker p+1
    produce(cluster.bootstrap_servers(), topic, spread(n, partitions))
    return topic


def test_a_misspelled_topic_is_reported_and_logged_once(kafka_cluster: MockKafkaCluster,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(kafka_cluster)
    coordinator = KafkaCoordinator(config(kafka_cluster.bootstrap_servers(), topics=[topic + "-typo"]), "topo")
    try:
        with caplog.at_level(logging.WARNING, logger="spouts.kafka"):
            assert coordinator.refresh() == []
            assert coordinator.refresh() == []
        assert coordinator.problem is not None
        assert f"{topic}-typo" in coordinator.problem
        assert kafka_cluster.bootstrap_servers() in coordinator.problem
        warnings = [r.getMessage() for r in caplog.records if f"{topic}-typo" in r.getMessage()]
        assert len(warnings) == 1  # a change is logged, not every refresh
        kafka_cluster.create_topic(topic + "-typo", 1)
        assert coordinator.refresh() == [Partition(topic + "-typo", 0)]
        assert coordinator.problem is None
    finally:
        coordinator.close()


def test_a_pattern_that_matches_nothing_is_reported(kafka_cluster: MockKafkaCluster) -> None:
    coordinator = KafkaCoordinator(config(kafka_cluster.bootstrap_servers(), topic_pattern="nothing-[0-9]+"), "topo")
    try:
        assert coordinator.refresh() == []
        assert coordinator.problem is not None
        assert "nothing-[0-9]+" in coordinator.problem
    finally:
        coordinator.close()


def test_an_unreachable_cluster_is_named_and_transient() -> None:
    coordinator = KafkaCoordinator(config("127.0.0.1:1", topics=["t"], request_timeout_s=0.5), "topo")
    try:
        with pytest.raises(SourceUnavailableError, match=r"127.0.0.1:1") as info:
            coordinator.partitions()
    finally:
        coordinator.close()
    assert not FailurePolicy().decide(Failure(info.value, txid=1, attempt=1)).permanent


def test_an_unknown_librdkafka_property_is_permanent_naming_it() -> None:
    coordinator = KafkaCoordinator(config("127.0.0.1:1", topics=["t"], properties={"fetch.wiat.max.ms": "5"}), "topo")
    try:
        with pytest.raises(SourceUnavailableError) as info:
            coordinator.partitions()
    finally:
        coordinator.close()
    decision = FailurePolicy().decide(Failure(info.value, txid=1, attempt=1))
    assert decision.permanent
    assert decision.exit_code == BAD_INPUT
    assert "fetch.wiat.max.ms" in decision.reason


def test_an_opaque_spout_logs_the_partition_it_skips_and_its_lag_is_unknown(
        kafka_cluster: MockKafkaCluster, caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(kafka_cluster)
    metrics = SpoutMetrics(CollectorRegistry())
    spout = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topics=[topic], request_timeout_s=0.5), "topo",
                       metrics)
    em = spout.emitter()
    last = PartitionMetadata(topic, 2, 0, 4, 4, "topo")
    stalled = PartitionMetadata(topic, 2, 4, 4, 0, "topo")  # nothing read, resuming where the last range ended
    for _ in range(20):  # the new leader may take a moment to answer
        if em.plan_partition(Partition(topic, 2), last, 100) != stalled:
            break
    assert metrics.value("trident_partition_lag", pipeline="topo", topic=topic, partition="2") == 6
    kafka_cluster.broker_down(3)
    with caplog.at_level(logging.WARNING, logger="spouts.kafka"):
        for _ in range(3):
            assert em.plan_partition(Partition(topic, 2), last, 100) == stalled
    kafka_cluster.broker_up(3)
    skipped = [r.getMessage() for r in caplog.records if f"{topic}:2 skipped" in r.getMessage()]
    assert len(skipped) == 1  # rate-limited
    assert kafka_cluster.bootstrap_servers() in skipped[0]
    assert math.isnan(metrics.value("trident_partition_lag", pipeline="topo", topic=topic, partition="2"))


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_retention_inside_a_frozen_range_follows_the_policy(kafka_cluster: MockKafkaCluster,
                                                          policy: DataLossPolicy) -> None:
    topic = _topic(kafka_cluster, partitions=1)
    metrics = SpoutMetrics(CollectorRegistry())
    em = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topics=[topic], data_loss=policy), "topo",
                    metrics).emitter()
    frozen = PartitionMetadata(topic, 0, 10, 20, 10, "topo")
    assert em.replan_frozen(frozen) == frozen  # nothing gone yet
    kafka_cluster.delete_records(topic, 0, 14)
    if policy is DataLossPolicy.FAIL:
        with pytest.raises(DataLossError, match="next offset to read is 10 but the log starts at 14"):
            em.replan_frozen(frozen)
    else:
        left = em.replan_frozen(frozen)
        assert (left.first_offset, left.next_offset) == (14, 20)
        assert [r.offset for r in em.emit_partition(left)] == list(range(14, 20))
        assert metrics.value("trident_data_loss_offsets_total", pipeline="topo", topic=topic, partition="0") == 4
    assert metrics.value("trident_data_loss_events_total", pipeline="topo", topic=topic, partition="0", policy=policy.value) == 1
