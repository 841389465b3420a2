"""Planning ranges on any Kafka peer: first-poll strategies, caps, resume offsets, data loss."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from spouts.errors import DataLossError
from spouts.kafka import FirstPoll, KafkaEmitter, KafkaSpout, TransactionalKafkaSpout
from spouts.metadata import Partition, PartitionMetadata
from spouts.metrics import SpoutMetrics
from spouts.planner import Caps, plan_batch
from spouts.protocols import DataLossPolicy
from tests.kafka.fixtures import TIMESTAMP_LOOKUP, KafkaPeer, skip_mock_gap, unique_topic
from tests.kafka.helpers import config, parts, produce, spread

T0 = 1_700_000_000_000  # record timestamps in these tests: T0 + 1000 * i


def _topic(peer: KafkaPeer, n: int, partitions: int = 1, **kw: object) -> str:
    topic = unique_topic()
    peer.create_topic(topic, partitions)
    produce(peer.bootstrap_servers(), topic, spread(n, partitions), **kw)  # type: ignore[arg-type]
    return topic


def _emitter(peer: KafkaPeer, topic: str, topology: str = "topo", **kw: object) -> KafkaEmitter:
    return KafkaSpout(config(peer.bootstrap_servers(), topics=[topic], **kw), topology).emitter()


def _range(meta: PartitionMetadata | None) -> tuple[int, int, int] | None:
    return None if meta is None else (meta.first_offset, meta.next_offset, meta.record_count)


def test_first_poll_earliest_starts_at_the_log_start(kafka_peer: KafkaPeer) -> None:
    """EARLIEST plans from the low watermark, which retention may have raised above 0."""
    topic = _topic(kafka_peer, 10)
    kafka_peer.delete_records(topic, 0, 4)
    meta = _emitter(kafka_peer, topic, first_poll=FirstPoll.EARLIEST).plan_partition(Partition(topic, 0), None, 100)
    assert _range(meta) == (4, 10, 6)
    assert meta is not None
    assert meta.topology_id == "topo"


def test_first_poll_latest_starts_at_the_end_then_follows(kafka_peer: KafkaPeer) -> None:
    """LATEST plans an empty range at the end; the next plan takes only records produced after it."""
    topic = _topic(kafka_peer, 10)
    em = _emitter(kafka_peer, topic, first_poll=FirstPoll.LATEST)
    first = em.plan_partition(Partition(topic, 0), None, 100)
    assert _range(first) == (10, 10, 0)
    produce(kafka_peer.bootstrap_servers(), topic, spread(5, 1, tag="new"))
    second = em.plan_partition(Partition(topic, 0), first, 100)
    assert second is not None
    assert _range(second) == (10, 15, 5)
    assert [r.value for r in em.emit_partition(second)] == [b"new0", b"new1", b"new2", b"new3", b"new4"]


def test_first_poll_timestamp_after_every_record_starts_at_the_end(kafka_peer: KafkaPeer) -> None:
    """TIMESTAMP later than every record finds no offset and starts at the end (as Kafka answers -1)."""
    topic = _topic(kafka_peer, 6, timestamps=[T0 + 1000 * i for i in range(6)])
    em = _emitter(kafka_peer, topic, first_poll=FirstPoll.TIMESTAMP, first_poll_timestamp_ms=T0 + 10**9)
    assert _range(em.plan_partition(Partition(topic, 0), None, 100)) == (6, 6, 0)


def test_first_poll_timestamp_starts_at_the_first_record_at_or_after_it(kafka_peer: KafkaPeer) -> None:
    """TIMESTAMP starts at the first record whose timestamp is >= the configured time (broker lookup)."""
    if not TIMESTAMP_LOOKUP[kafka_peer.kind]:
        skip_mock_gap("librdkafka's mock answers ListOffsets-by-timestamp with -1 (rdkafka_mock_handlers.c "
                    "'FIXME: by timestamp'); the mapping is covered by test_timestamp_answer_is_used_and_clamped")
    topic = _topic(kafka_peer, 6, timestamps=[T0 + 1000 * i for i in range(6)])
    em = _emitter(kafka_peer, topic, first_poll=FirstPoll.TIMESTAMP, first_poll_timestamp_ms=T0 + 2500)
    assert _range(em.plan_partition(Partition(topic, 0), None, 100)) == (3, 6, 3)


@pytest.mark.parametrize(("answer", "expected_start"), [(3, 3), (-1, 10), (1, 4), (99, 10)])
def test_timestamp_answer_is_used_and_clamped(kafka_peer: KafkaPeer, monkeypatch: pytest.MonkeyPatch,
                                              answer: int, expected_start: int) -> None:
    """The broker's answer for the timestamp is the start; -1 means the end; it is kept within [log start, end]."""
    topic = _topic(kafka_peer, 10)
    kafka_peer.delete_records(topic, 0, 4 if answer == 1 else 0)
    em = _emitter(kafka_peer, topic, first_poll=FirstPoll.UNCOMMITTED_TIMESTAMP, first_poll_timestamp_ms=T0)
    asked: list[int] = []
    def offset_for_time(p: Partition, ts: int) -> int | None:
        asked.append(ts)
        return answer

    monkeypatch.setattr(em, "_offset_for_time", offset_for_time)
    meta = em.plan_partition(Partition(topic, 0), None, 100)
    assert asked == [T0]
    assert meta is not None
    assert (meta.first_offset, meta.next_offset) == (expected_start, 10)


# (strategy, start when last was stored by this topology, start when stored by another topology)
_RESUME = [
    (FirstPoll.EARLIEST, 6, 0),
    (FirstPoll.LATEST, 6, 10),
    (FirstPoll.TIMESTAMP, 6, 10),  # time after every record: the end
    (FirstPoll.UNCOMMITTED_EARLIEST, 6, 6),
    (FirstPoll.UNCOMMITTED_LATEST, 6, 6),
    (FirstPoll.UNCOMMITTED_TIMESTAMP, 6, 6),
]


@pytest.mark.parametrize(("strategy", "same_topology", "other_topology"), _RESUME, ids=[s.name for s, *_ in _RESUME])
def test_stored_metadata_is_resumed_or_ignored_by_strategy(kafka_peer: KafkaPeer, strategy: FirstPoll,
                                                           same_topology: int, other_topology: int) -> None:
    """Every strategy resumes its own topology's metadata; only UNCOMMITTED_* resume another topology's."""
    topic = _topic(kafka_peer, 10)
    em = _emitter(kafka_peer, topic, "new-topo", first_poll=strategy, first_poll_timestamp_ms=T0 + 10**12)
    mine = PartitionMetadata(topic, 0, 2, 6, 4, "new-topo")
    theirs = replace(mine, topology_id="old-topo")
    for last, expected in ((mine, same_topology), (theirs, other_topology)):
        meta = em.plan_partition(Partition(topic, 0), last, 100)
        assert meta is not None, last
        assert (meta.first_offset, meta.next_offset) == (expected, 10), last
        assert meta.topology_id == "new-topo"


def test_resume_starts_at_next_offset_never_plus_one(kafka_peer: KafkaPeer) -> None:
    """Successive plans tile the log: each range starts exactly where the last one ended."""
    topic = _topic(kafka_peer, 10)
    em = _emitter(kafka_peer, topic)
    p = Partition(topic, 0)
    metas: list[tuple[int, int, int]] = []
    last = None
    for _ in range(5):
        last = em.plan_partition(p, last, 3)
        assert last is not None
        metas.append((last.first_offset, last.next_offset, last.record_count))
    assert metas == [(0, 3, 3), (3, 6, 3), (6, 9, 3), (9, 10, 1), (10, 10, 0)]
    values = [r.offset for m in metas for r in em.emit_partition(PartitionMetadata(topic, 0, m[0], m[1], m[2], "topo"))]
    assert values == list(range(10))


def test_plan_sets_partition_lag_to_end_minus_committed_offset(kafka_peer: KafkaPeer) -> None:
    """Planning publishes each partition's lag: log end minus the next offset the last committed batch stored."""
    topic = _topic(kafka_peer, 10)
    metrics = SpoutMetrics(CollectorRegistry())
    em = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "lagging", metrics).emitter()
    em.plan_partition(Partition(topic, 0), PartitionMetadata(topic, 0, 0, 3, 3, "lagging"), 2)
    assert metrics.value("trident_partition_lag", pipeline="lagging", topic=topic, partition="0") == 7


def test_caps_bound_each_partition_and_the_batch(kafka_peer: KafkaPeer) -> None:
    """Under the planner's caps no partition exceeds per_partition and no batch exceeds per_batch; all is read once."""
    topic = _topic(kafka_peer, 60, partitions=3)
    em = _emitter(kafka_peer, topic)
    caps = Caps(per_partition=7, per_batch=12)
    last, seen, txid = None, [], 0
    while True:
        txid += 1
        plan = plan_batch(txid, parts(topic, 3), em, last, caps)
        assert plan.offset_count <= 12
        assert all(m.next_offset - m.first_offset <= 7 for m in plan)
        if plan.offset_count == 0:
            break
        seen += [(r.partition, r.offset) for m in plan for r in em.emit_partition(m)]
        last = plan
    assert sorted(seen) == [(p, o) for p in range(3) for o in range(20)]
    assert len(seen) == len(set(seen))
    assert txid >= 6  # 60 records at most 12 per batch


def test_data_loss_fails_by_default_naming_the_gap(kafka_peer: KafkaPeer) -> None:
    """A stored next offset below the log start raises DataLossError with topic, partition and both offsets."""
    topic = _topic(kafka_peer, 10)
    kafka_peer.delete_records(topic, 0, 7)
    registry = CollectorRegistry()
    spout = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "topo", SpoutMetrics(registry))
    last = PartitionMetadata(topic, 0, 0, 3, 3, "topo")
    with pytest.raises(DataLossError) as info:
        spout.emitter().plan_partition(Partition(topic, 0), last, 100)
    assert (info.value.partition, info.value.next_offset, info.value.log_start) == (Partition(topic, 0), 3, 7)
    assert f"{topic}:0" in str(info.value)
    assert registry.get_sample_value(
        "trident_data_loss_events_total", {"pipeline": "topo", "topic": topic, "partition": "0", "policy": "fail"}) == 1


def test_data_loss_skip_continues_at_the_log_start_with_metrics_and_a_log_line(
        kafka_peer: KafkaPeer, caplog: pytest.LogCaptureFixture) -> None:
    """Policy SKIP plans from the log start, counts the event and the lost offsets, and logs a warning."""
    topic = _topic(kafka_peer, 10)
    kafka_peer.delete_records(topic, 0, 7)
    metrics = SpoutMetrics(CollectorRegistry())
    spout = TransactionalKafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic],
                                           data_loss=DataLossPolicy.SKIP), "topo", metrics)
    with caplog.at_level(logging.WARNING, logger="spouts.kafka"):
        meta = spout.emitter().plan_partition(Partition(topic, 0), PartitionMetadata(topic, 0, 0, 3, 3, "topo"), 100)
    assert _range(meta) == (7, 10, 3)
    assert metrics.value("trident_data_loss_events_total", pipeline="topo", topic=topic, partition="0", policy="skip") == 1
    assert metrics.value("trident_data_loss_offsets_total", pipeline="topo", topic=topic, partition="0") == 4
    assert any("data loss" in r.getMessage() and f"{topic}:0" in r.getMessage() for r in caplog.records)


def test_frozen_range_below_the_log_start_cannot_be_replayed(kafka_peer: KafkaPeer) -> None:
    """Reading a frozen range whose start retention removed raises DataLossError (it can't be replayed as planned)."""
    topic = _topic(kafka_peer, 10)
    em = _emitter(kafka_peer, topic, data_loss=DataLossPolicy.SKIP)
    meta = em.plan_partition(Partition(topic, 0), None, 5)
    assert meta is not None
    kafka_peer.delete_records(topic, 0, 8)
    with pytest.raises(DataLossError) as info:
        em.emit_partition(meta)
    assert (info.value.next_offset, info.value.log_start) == (0, 8)
