"""A plan asks the watermarks of all its partitions in bulk, answered exactly as one partition's query is.

The leased consumers are wrapped to count (and, for the fallback tests, to alter) their watermark queries:
``get_watermark_offsets`` is one partition's query, ``offsets_for_times`` the bulk one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from spouts.errors import PartitionUnavailableError
from spouts.kafka import FirstPoll, KafkaEmitter, KafkaSpout, TransactionalKafkaSpout
from spouts.kafka.consumers import POOL
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.planner import Caps, plan_batch
from tests.kafka.fixtures import READ_COMMITTED, KafkaPeer, MockKafkaCluster, skip_mock_gap, unique_topic
from tests.kafka.helpers import config, parts, produce, spread

Answers = list[Any]  # offsets_for_times' answers: TopicPartition, or a stand-in with .topic/.partition/.offset/.error


@dataclass
class Calls:
    """The watermark queries of the leased consumers; ``alter`` rewrites each bulk answer (or raises)."""

    single: list[Partition] = field(default_factory=list)
    bulk: list[list[Partition]] = field(default_factory=list)
    alter: Callable[[Answers], Answers] = lambda answers: answers


class _Counted:
    """A leased consumer whose watermark queries are counted in ``calls``."""

    def __init__(self, consumer: Consumer, calls: Calls) -> None:
        self._consumer, self._calls = consumer, calls

    def get_watermark_offsets(self, tp: TopicPartition, *args: Any, **kw: Any) -> Any:
        self._calls.single.append(Partition(tp.topic, tp.partition))
        return self._consumer.get_watermark_offsets(tp, *args, **kw)

    def offsets_for_times(self, tps: list[TopicPartition], *args: Any, **kw: Any) -> Answers:
        self._calls.bulk.append([Partition(tp.topic, tp.partition) for tp in tps])
        return self._calls.alter(self._consumer.offsets_for_times(tps, *args, **kw))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    counted = Calls()
    lease = POOL.lease

    @contextmanager
    def counting_lease(conf: Mapping[str, object]) -> Iterator[Any]:
        with lease(conf) as consumer:
            yield _Counted(consumer, counted)

    monkeypatch.setattr(POOL, "lease", counting_lease)
    return counted


class _OnePerPartition:
    """``em`` without bulk planning: each partition's watermarks asked alone, as before bulk planning."""

    def __init__(self, em: KafkaEmitter) -> None:
        self._em = em

    def plan_partition(self, partition: Partition, last: PartitionMetadata | None,
                       max_records: int) -> PartitionMetadata | None:
        return self._em.plan_partition(partition, last, max_records)

    def emit_partition(self, meta: PartitionMetadata) -> Iterable[Any]:
        return self._em.emit_partition(meta)

    def replan_frozen(self, meta: PartitionMetadata) -> PartitionMetadata:
        return self._em.replan_frozen(meta)

    def close(self) -> None:
        self._em.close()


@dataclass(frozen=True)
class _Answer:
    topic: str
    partition: int
    offset: int
    error: KafkaError | None


def _without(partition: int, how: str) -> Callable[[Answers], Answers]:
    """A bulk answer with ``partition``'s entry dropped ("missing"), errored ("errored"), or the call failing."""
    def alter(answers: Answers) -> Answers:
        if how == "failed":
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        if how == "missing":
            return [a for a in answers if a.partition != partition]
        return [_Answer(a.topic, a.partition, a.offset, KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
                if a.partition == partition else a for a in answers]
    return alter


def _ranges(plan: BatchPlan) -> dict[int, tuple[int, int, int]]:
    return {p.partition: (m.first_offset, m.next_offset, m.record_count) for p, m in plan.partitions.items()}


def test_a_plan_asks_the_watermarks_in_bulk_not_once_per_partition(kafka_peer: KafkaPeer, calls: Calls) -> None:
    """8 partitions: 2 bulk queries (earliest, latest) instead of 8 single ones, and the same plans as before."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 8)
    produce(kafka_peer.bootstrap_servers(), topic, spread(60, 8))
    em = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "topo").emitter()
    caps = Caps(per_partition=3)
    old_last = new_last = None
    for txid in (1, 2, 3):
        calls.single.clear()
        calls.bulk.clear()
        old = plan_batch(txid, parts(topic, 8), _OnePerPartition(em), old_last, caps)
        assert (len(calls.single), len(calls.bulk)) == (8, 0)
        calls.single.clear()
        new = plan_batch(txid, parts(topic, 8), em, new_last, caps)
        assert calls.single == []
        assert len(calls.bulk) == 2
        assert all(sorted(asked) == parts(topic, 8) for asked in calls.bulk)
        assert _ranges(new) == _ranges(old)
        assert new == old
        old_last, new_last = old, new
    assert em._prefetched == {}


def test_bulk_end_is_the_lso_under_read_committed(kafka_peer: KafkaPeer) -> None:
    """An open transaction: the bulk end is get_watermark_offsets' high, the LSO (the high watermark uncommitted)."""
    if not READ_COMMITTED[kafka_peer.kind]:
        skip_mock_gap("librdkafka's mock has no LSO (ListOffsets latest = high watermark whatever the isolation "
                      "level); checked by test_mock_gaps_still_hold")
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    produce(bootstrap, topic, spread(10, 2))
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("open")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for _ in range(3):
        tx.produce(topic, b"open", partition=0)
    tx.flush(30)
    try:
        ps = parts(topic, 2)
        answers: dict[str, dict[Partition, tuple[int, int]]] = {}
        for isolation in ("read_committed", "read_uncommitted"):
            em = KafkaSpout(config(bootstrap, topics=[topic], isolation_level=isolation), "topo").emitter()
            bulk = em._bulk_watermarks(ps)
            assert bulk == {p: em._watermarks(p) for p in ps}, isolation
            ref = Consumer(em._planning_config)
            try:
                assert bulk == {p: ref.get_watermark_offsets(TopicPartition(p.topic, p.partition), timeout=10,
                                                             cached=False) for p in ps}, isolation
            finally:
                ref.close()
            answers[isolation] = bulk
        assert answers["read_committed"][ps[0]] == (0, 5)  # the LSO: the open transaction starts at offset 5
        assert answers["read_uncommitted"][ps[0]] == (0, 8)  # the high watermark
        assert answers["read_committed"][ps[1]] == answers["read_uncommitted"][ps[1]] == (0, 5)
    finally:
        tx.abort_transaction(30)


def test_bulk_start_is_the_log_start_after_delete_records(kafka_peer: KafkaPeer, calls: Calls) -> None:
    """Records deleted below 4 and 7: the bulk start is the log start, as get_watermark_offsets' low, and plans
    from it."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 3)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30, 3))
    kafka_peer.delete_records(topic, 0, 4)
    kafka_peer.delete_records(topic, 1, 7)
    em = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic], first_poll=FirstPoll.EARLIEST),
                    "topo").emitter()
    ps = parts(topic, 3)
    bulk = em._bulk_watermarks(ps)
    assert bulk == {ps[0]: (4, 10), ps[1]: (7, 10), ps[2]: (0, 10)}
    assert bulk == {p: em._watermarks(p) for p in ps}
    calls.single.clear()
    plan = plan_batch(1, ps, em, None, Caps())
    assert calls.single == []
    assert _ranges(plan) == {0: (4, 10, 6), 1: (7, 10, 3), 2: (0, 10, 10)}


def test_watermarks_fetched_for_a_plan_do_not_outlive_it(kafka_peer: KafkaPeer) -> None:
    """A partition a plan did not visit (the batch cap was spent) is asked afresh afterwards; so after a raise."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    produce(kafka_peer.bootstrap_servers(), topic, spread(10, 2))
    em = KafkaSpout(config(kafka_peer.bootstrap_servers(), topics=[topic]), "topo").emitter()
    ps = parts(topic, 2)
    first = plan_batch(2, ps, em, None, Caps(per_batch=5))  # txid 2 visits partition 0 first and spends the cap
    assert _ranges(first) == {0: (0, 5, 5)}
    assert em._prefetched == {}
    produce(kafka_peer.bootstrap_servers(), topic, [(1, b"late")])
    assert _ranges(plan_batch(3, ps, em, first, Caps())) == {0: (5, 5, 0), 1: (0, 6, 6)}
    produce(kafka_peer.bootstrap_servers(), topic, [(1, b"later")])
    meta = em.plan_partition(ps[1], None, 100)
    assert meta is not None
    assert (meta.first_offset, meta.next_offset) == (0, 7)
    with pytest.raises(RuntimeError), em.planning(ps):
        raise RuntimeError
    assert em._prefetched == {}


# -- a partition the bulk query does not answer (mock cluster) ---------------------------------------------


def _mock_topic(cluster: MockKafkaCluster) -> str:
    topic = unique_topic()
    cluster.create_topic(topic, 3)
    for p in range(3):
        cluster.set_leader(topic, p, p + 1)  # partition p led by broker p+1: one ListOffsets per broker and kind
    produce(cluster.bootstrap_servers(), topic, spread(30, 3))
    return topic


@pytest.mark.parametrize("how", ["missing", "errored", "failed"])
def test_a_partition_the_bulk_query_does_not_answer_is_asked_alone(kafka_cluster: MockKafkaCluster, calls: Calls,
                                                                   how: str) -> None:
    """Partition 1 missing from the bulk answer, errored in it, or the bulk call failing: asked alone, same plan."""
    topic = _mock_topic(kafka_cluster)
    em = KafkaSpout(config(kafka_cluster.bootstrap_servers(), topics=[topic], request_timeout_s=1.0), "topo").emitter()
    last = BatchPlan(1, {Partition(topic, p): PartitionMetadata(topic, p, 0, 2, 2, "topo") for p in range(3)})
    expected = plan_batch(2, parts(topic, 3), _OnePerPartition(em), last, Caps())
    calls.single.clear()
    calls.alter = _without(1, how)
    assert plan_batch(2, parts(topic, 3), em, last, Caps()) == expected
    assert sorted(calls.single) == (parts(topic, 3) if how == "failed" else [Partition(topic, 1)])
    assert len(calls.bulk) == (1 if how == "failed" else 2)


def test_an_unreadable_partition_is_asked_alone_then_skipped_or_raised(kafka_cluster: MockKafkaCluster,
                                                                       calls: Calls) -> None:
    """A leaderless partition, errored in the bulk answer: the opaque plan keeps it in place and plans the others
    from the bulk answer; the transactional plan raises PartitionUnavailableError, as before bulk planning."""
    topic = _mock_topic(kafka_cluster)
    cfg = config(kafka_cluster.bootstrap_servers(), topics=[topic], request_timeout_s=1.0)
    last = BatchPlan(1, {Partition(topic, p): PartitionMetadata(topic, p, 0, 2, 2, "topo") for p in range(3)})
    kafka_cluster.set_leader(topic, 2, -1)
    calls.alter = _without(2, "errored")
    calls.single.clear()
    opaque = plan_batch(2, parts(topic, 3), KafkaSpout(cfg, "topo").emitter(), last, Caps())
    assert _ranges(opaque) == {0: (2, 10, 8), 1: (2, 10, 8), 2: (2, 2, 0)}
    assert calls.single == [Partition(topic, 2)]
    with pytest.raises(PartitionUnavailableError) as info:
        plan_batch(2, parts(topic, 3), TransactionalKafkaSpout(cfg, "topo").emitter(), last, Caps())
    assert info.value.partition == Partition(topic, 2)
