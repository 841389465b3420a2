"""Topic ids on librdkafka's mock cluster: without a controller it tells none (offsets alone decide, as before ids
were kept, and no plan waits for an admin timeout); with one named, a re-created topic gets a new id.

The same behaviour on a real Kafka, through the coordinator and against the producer's truth: test_positions.py.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid
from confluent_kafka.admin import TopicDescription
from prometheus_client import CollectorRegistry

from spouts.errors import LogRestartedError, TopicRecreatedError
from spouts.kafka.emitter import KafkaEmitter
from spouts.kafka.topic_ids import PendingIds
from spouts.metadata import Partition, PartitionMetadata
from spouts.metrics import SpoutMetrics
from spouts.protocols import DataLossPolicy
from tests.kafka.fixtures import MockKafkaCluster, unique_topic
from tests.kafka.helpers import config, produce, spread


def _read_to_the_end(topic: str, emitter: KafkaEmitter) -> PartitionMetadata:
    """The committed position of a first batch that read the whole partition 0 of ``topic``."""
    p = Partition(topic, 0)
    with emitter.planning([p]):
        planned = emitter.plan_partition(p, None, 1000)
    assert planned is not None
    return planned


def _recreate(cluster: MockKafkaCluster, topic: str, records: int) -> None:
    cluster.delete_topic(topic)
    cluster.create_topic(topic, 1)
    produce(cluster.bootstrap_servers(), topic, spread(records, 1, tag="new"))


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_without_topic_ids_offsets_alone_tell_a_recreated_topic(kafka_cluster: MockKafkaCluster,
                                                                policy: DataLossPolicy) -> None:
    """No controller, so no ids: a plan asks none (and waits for no timeout); a re-created log below the position
    is data loss by its offsets, as before; one grown past it cannot be told and is resumed at the position
    (the documented limit where ids are unknown)."""
    topic = unique_topic("noids")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, spread(30, 1, tag="old"))
    emitter = KafkaEmitter(config(kafka_cluster.bootstrap_servers(), topics=[topic], data_loss=policy), "words")
    last = _read_to_the_end(topic, emitter)
    assert (last.next_offset, last.topic_id) == (30, None)
    assert emitter.topic_ids.requests == 0
    p = Partition(topic, 0)

    _recreate(kafka_cluster, topic, 20)
    began = time.monotonic()
    with emitter.planning([p]):
        if policy is DataLossPolicy.FAIL:
            with pytest.raises(LogRestartedError, match="stored next offset is 30 but the log ends at 20"):
                emitter.plan_partition(p, last, 100)
        else:
            below = emitter.plan_partition(p, last, 100)
            assert below is not None
            assert (below.first_offset, below.next_offset) == (0, 20)
    assert time.monotonic() - began < emitter.config.request_timeout_s

    _recreate(kafka_cluster, topic, 50)
    with emitter.planning([p]):
        grown = emitter.plan_partition(p, last, 100)
    assert grown is not None
    assert (grown.first_offset, grown.next_offset, grown.topic_id) == (30, 50, None)


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_with_a_controller_a_recreated_topic_grown_past_the_position_is_data_loss(
        kafka_cluster: MockKafkaCluster, policy: DataLossPolicy) -> None:
    """A controller named: ranges carry the topic's id; a re-created topic grown past the position is told by
    its new id: fail raises naming both ids; skip plans the new log from its start, counted once however often
    the txid is planned again."""
    kafka_cluster.set_controller(kafka_cluster.broker_ids[0])
    topic = unique_topic("ids")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, spread(30, 1, tag="old"))
    metrics = SpoutMetrics(CollectorRegistry())
    emitter = KafkaEmitter(config(kafka_cluster.bootstrap_servers(), topics=[topic], data_loss=policy), "words",
                           metrics=metrics)
    last = _read_to_the_end(topic, emitter)
    assert last.next_offset == 30
    assert last.topic_id is not None
    p = Partition(topic, 0)

    _recreate(kafka_cluster, topic, 50)
    for _ in range(2):  # the same txid planned twice (its first attempt failed before the freeze)
        with emitter.planning([p]):
            if policy is DataLossPolicy.FAIL:
                with pytest.raises(TopicRecreatedError, match=re.escape(f"its id was {last.topic_id}, now ")) as raised:
                    emitter.plan_partition(p, last, 100)
                assert raised.value.current_id != last.topic_id
                continue
            planned = emitter.plan_partition(p, last, 100)
        assert planned is not None
        assert (planned.first_offset, planned.next_offset) == (0, 50)
        assert planned.topic_id not in (None, last.topic_id)
    assert metrics.value("trident_data_loss_events_total", pipeline="words", topic=topic, partition="0",
                         policy=policy.value) == 1


def _answered(value: Any) -> Future[Any]:
    future: Future[Any] = Future()
    if isinstance(value, BaseException):
        future.set_exception(value)
    else:
        future.set_result(value)
    return future


def test_a_zero_id_or_a_failed_answer_is_an_unknown_id() -> None:
    """A broker without topic ids answers the zero id (before Kafka 2.8); a topic's own error leaves it out too:
    both are unknown ids, never an id that could differ from a stored one."""
    pending = PendingIds({
        "old-broker": _answered(TopicDescription("old-broker", Uuid(0, 0), False, [])),
        "refused": _answered(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))),
        "known": _answered(TopicDescription("known", Uuid(1, 2), False, [])),
    }, 1.0)
    assert pending.result() == {"known": str(Uuid(1, 2))}
