"""What a range read costs beyond its records: what librdkafka fetches past the range, and the collector."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from spouts.kafka import read_arrow
from spouts.kafka.gc_pause import gc_paused
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.kafka.reader import read_range
from spouts.metadata import PartitionMetadata
from tests.kafka.fixtures import KafkaPeer, skip_mock_gap, unique_topic
from tests.kafka.helpers import config, produce, spread


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations of the collections that start while the test runs."""
    seen: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        yield seen
    finally:
        gc.callbacks.remove(count)


def test_the_pause_restores_the_collector_and_nests() -> None:
    """Off inside, back to its earlier state after the outermost pause; a collector already off stays off."""
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_reading_a_range_runs_no_collection_and_never_leaves_the_collector_off(
        kafka_peer: KafkaPeer, collections: list[int]) -> None:
    """Allocating a record batch per 1,000 messages would start dozens of collections; the read starts none
    inside its chunks, the collector is on at every yield, and abandoning the read mid-range leaves it on."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30_000, 1))
    meta = PartitionMetadata(topic, 0, 0, 30_000, 30_000, "topo")
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic])
    rows, on_at_yield = 0, []
    collections.clear()
    for batch in read_arrow(cfg, "topo", meta, batch_size=30_000):
        on_at_yield.append(gc.isenabled())
        rows += batch.num_rows
    assert rows == 30_000
    assert on_at_yield == [True]
    assert len(collections) <= 2, f"{len(collections)} collections during the read"
    messages: list[list[object]] = []
    for _ in range(30_000):  # as many live objects allocated outside a pause: collections do start
        messages.append([])  # noqa: PERF401  a loop reads clearer here
    assert len(collections) >= 10
    abandoned = read_arrow(cfg, "topo", meta, batch_size=1_000)
    next(abandoned)
    abandoned.close()
    assert gc.isenabled()


def test_a_small_range_is_not_read_many_times_over(kafka_peer: KafkaPeer) -> None:
    """On a real broker, reading 4,000-record ranges of 90-byte sentences makes librdkafka receive at most
    2.5x the range (its defaults prefetched up to 100,000 records past the range's end)."""
    if isinstance(kafka_peer, MockKafkaCluster):
        skip_mock_gap("the mock answers a fetch with what it holds, not as a broker sizes it")
    topic, size, partitions = unique_topic(), 4_000, 4
    kafka_peer.create_topic(topic, partitions)
    sentence = b"the quick brown fox jumps over the lazy dog, then naps in the sun until the evening %d"
    produce(kafka_peer.bootstrap_servers(), topic, [(i % partitions, sentence % i) for i in range(40_000 * partitions)])
    received: list[int] = []
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic])
    conf: dict[str, Any] = {**cfg.consumer_config("topo", range_records=size), "statistics.interval.ms": 50,
                            "stats_cb": lambda stats: received.append(json.loads(stats)["rxmsgs"])}
    consumer = Consumer(conf)
    try:
        delivered = 0
        for start in range(0, 20_000, size):
            for p in range(partitions):
                meta = PartitionMetadata(topic, p, start, start + size, size, "topo")
                delivered += sum(len(chunk) for chunk in read_range(consumer, meta, read_timeout_s=30))
        consumer.poll(0.3)  # one more statistics interval
    finally:
        consumer.close()
    assert delivered == 20_000 * partitions
    print(f"librdkafka received {received[-1]} messages for {delivered} records ({received[-1] / delivered:.2f}x)")
    assert received, f"received {received[-1]} for {delivered} records"
    assert received[-1] <= 2.5 * delivered, f"received {received[-1]} for {delivered} records"
