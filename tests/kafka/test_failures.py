"""Unavailable partitions on the mock cluster: the opaque spout moves on, the transactional one waits."""

from __future__ import annotations

import pytest

from spouts.errors import PartitionUnavailableError
from spouts.kafka import KafkaSpout, TransactionalKafkaSpout
from spouts.metadata import Partition, PartitionMetadata
from spouts.planner import Caps, plan_batch
from tests.kafka.fixtures import MockKafkaCluster, unique_topic
from tests.kafka.helpers import config, parts, produce, spread

LIST_OFFSETS = 2
NOT_LEADER = 6


def _setup(cluster: MockKafkaCluster, n: int = 30, partitions: int = 3) -> str:
    topic = unique_topic()
    cluster.create_topic(topic, partitions)
    for p in range(partitions):
        cluster.set_leader(topic, p, p + 1)  # partition p led by broker p+1
    produce(cluster.bootstrap_servers(), topic, spread(n, partitions))
    return topic


def _cfg(cluster: MockKafkaCluster, topic: str) -> object:
    return config(cluster.bootstrap_servers(), topics=[topic], request_timeout_s=1.0, read_timeout_s=1.0)


def test_leaderless_partition_gets_an_empty_range_from_the_opaque_spout(kafka_cluster: MockKafkaCluster) -> None:
    """No leader: the opaque plan is an empty range where the last one ended (None if never read); others
    plan normally."""
    topic = _setup(kafka_cluster)
    em = KafkaSpout(_cfg(kafka_cluster, topic), "topo").emitter()  # type: ignore[arg-type]
    last = PartitionMetadata(topic, 1, 0, 4, 4, "topo")
    kafka_cluster.set_leader(topic, 1, -1)
    assert em.plan_partition(Partition(topic, 1), last, 100) == PartitionMetadata(topic, 1, 4, 4, 0, "topo")
    assert em.plan_partition(Partition(topic, 1), None, 100) is None
    ok = em.plan_partition(Partition(topic, 0), None, 100)
    assert ok is not None
    assert (ok.first_offset, ok.next_offset) == (0, 10)


def test_leaderless_partition_makes_the_transactional_plan_raise(kafka_cluster: MockKafkaCluster) -> None:
    """No leader: the transactional spout raises PartitionUnavailableError instead of changing the batch."""
    topic = _setup(kafka_cluster)
    kafka_cluster.set_leader(topic, 2, -1)
    em = TransactionalKafkaSpout(_cfg(kafka_cluster, topic), "topo").emitter()  # type: ignore[arg-type]
    with pytest.raises(PartitionUnavailableError) as info:
        em.plan_partition(Partition(topic, 2), None, 100)
    assert info.value.partition == Partition(topic, 2)
    with pytest.raises(PartitionUnavailableError):
        plan_batch(1, parts(topic, 3), em, None, Caps())


def test_failed_watermark_query_is_unavailability_not_an_error(kafka_cluster: MockKafkaCluster) -> None:
    """A ListOffsets error (pushed by the mock) makes one plan empty for the opaque spout; the next plan reads."""
    topic = _setup(kafka_cluster, partitions=1)
    em = KafkaSpout(_cfg(kafka_cluster, topic), "topo").emitter()  # type: ignore[arg-type]
    last = PartitionMetadata(topic, 0, 0, 5, 5, "topo")
    em.plan_partition(Partition(topic, 0), last, 100)  # connect first: the pushed errors hit ListOffsets
    kafka_cluster.push_request_errors(LIST_OFFSETS, NOT_LEADER, NOT_LEADER)
    assert em.plan_partition(Partition(topic, 0), last, 100) == PartitionMetadata(topic, 0, 5, 5, 0, "topo")
    after = em.plan_partition(Partition(topic, 0), last, 100)
    assert after is not None
    assert (after.first_offset, after.next_offset) == (5, 30)


def test_frozen_range_on_a_down_broker_raises_then_reads_identically(kafka_cluster: MockKafkaCluster) -> None:
    """Reading a frozen range whose leader is down raises PartitionUnavailableError; once up, it yields the same records."""
    topic = _setup(kafka_cluster)
    spout = KafkaSpout(_cfg(kafka_cluster, topic), "topo")  # type: ignore[arg-type]
    meta = PartitionMetadata(topic, 1, 2, 8, 6, "topo")
    before = [(r.offset, r.value) for r in spout.emitter().emit_partition(meta)]
    kafka_cluster.broker_down(2)
    with pytest.raises(PartitionUnavailableError):
        spout.emitter().emit_partition(meta)
    with pytest.raises(PartitionUnavailableError):
        list(spout.read_arrow(meta))
    kafka_cluster.broker_up(2)
    assert [(r.offset, r.value) for r in spout.emitter().emit_partition(meta)] == before
    assert [o for o, _ in before] == list(range(2, 8))


def test_down_broker_empties_only_its_partitions_in_an_opaque_batch(kafka_cluster: MockKafkaCluster) -> None:
    """With broker 3 down, an opaque batch plan keeps partition 2 in place and plans the others in full."""
    topic = _setup(kafka_cluster)
    em = KafkaSpout(_cfg(kafka_cluster, topic), "topo").emitter()  # type: ignore[arg-type]
    first = plan_batch(1, parts(topic, 3), em, None, Caps(per_partition=4))
    kafka_cluster.broker_down(3)
    second = plan_batch(2, parts(topic, 3), em, first, Caps(per_partition=4))
    assert {p.partition: (m.first_offset, m.next_offset) for p, m in second.partitions.items()} == \
        {0: (4, 8), 1: (4, 8), 2: (4, 4)}
