"""End to end through the in-process coordinator: Kafka spout -> LocalExecutor -> OpaqueMap/TransactionalMap.

Every test compares the stored counts with a ground truth computed from what was produced, so a
record lost or counted twice fails it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.metrics import Metrics
from app.topology.local import LocalExecutor, Sink
from spouts.errors import DataLossError
from spouts.kafka import (
    FirstPoll,
    KafkaSpout,
    KafkaSpoutConfig,
    TransactionalKafkaSpout,
)
from spouts.metrics import SpoutMetrics
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy
from states import Count, OpaqueMap, TransactionalMap
from states.memory import MemoryBackingMap, MemoryTransactionalStateStore
from tests.kafka.fixtures import READ_COMMITTED, KafkaPeer, MockKafkaCluster, skip_mock_gap, unique_topic
from tests.kafka.helpers import Produced, config, produce, spread, truth


@dataclass
class Pipeline:
    """A word count over a spout, stored in memory, restartable over the same store and backing map."""

    spout: KafkaSpout
    caps: Caps = field(default_factory=lambda: Caps(per_partition=100, per_batch=1000))
    transactional_state: bool = False

    def __post_init__(self) -> None:
        self.backing = MemoryBackingMap()
        self.store = MemoryTransactionalStateStore(self.spout.topology_id)
        self.metrics = Metrics(CollectorRegistry())
        self.coord = self.start()

    def start(self, faults: Any = None) -> Coordinator:
        state = TransactionalMap(self.backing) if self.transactional_state else OpaqueMap(self.backing)
        executor = LocalExecutor(self.spout.emitter(), [Sink(state, Count(), key=lambda rec: (rec.value.decode(),))])
        cfg = CoordinatorConfig(caps=self.caps, retry_backoff_s=(0.01, 0.05), idle_sleep_s=0.01, owner="test")
        return Coordinator(self.spout.topology_id, self.spout, executor, self.store, cfg, metrics=self.metrics,
                           faults=faults)

    def restart(self, faults: Any = None) -> Coordinator:
        self.coord.close()
        self.coord = self.start(faults)
        return self.coord

    def counts(self) -> Counter[str]:
        return Counter({cast(tuple[str], k)[0]: (v.val if self.transactional_state else v.curr)
                        for k, v in self.backing.data.items()})

    def close(self) -> None:
        self.coord.close()


@pytest.fixture
def pipelines() -> Iterator[list[Pipeline]]:
    made: list[Pipeline] = []
    yield made
    for p in made:
        p.close()


def _pipeline(made: list[Pipeline], cfg: KafkaSpoutConfig, *, transactional: bool = False, **kw: Any) -> Pipeline:
    spout = (TransactionalKafkaSpout if transactional else KafkaSpout)(cfg, "topology-1")
    made.append(Pipeline(spout, transactional_state=transactional, **kw))
    return made[-1]


def _topic(cluster: KafkaPeer, partitions: int = 3, leaders: bool = False) -> str:
    topic = unique_topic()
    cluster.create_topic(topic, partitions)
    if leaders:
        for p in range(partitions):
            cluster.set_leader(topic, p, p + 1)  # type: ignore[attr-defined]
    return topic


def _prefix_matches(counts: Counter[str], fixed: Iterable[Produced], variable: list[Produced]) -> int | None:
    """The n for which counts == truth(fixed + variable[:n]), if any (a partition read up to some offset)."""
    base = truth(fixed)
    for n in range(len(variable) + 1):
        if counts == base + truth(variable[:n]):
            return n
    return None


def test_earliest_counts_every_record_once_and_publishes_group_offsets(kafka_peer: KafkaPeer,
                                                                        pipelines: list[Pipeline]) -> None:
    """EARLIEST: all records counted once; the records metric and the consumer group's offsets match the log."""
    topic = _topic(kafka_peer)
    acked = produce(kafka_peer.bootstrap_servers(), topic, spread(300, 3))
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic], first_poll=FirstPoll.EARLIEST))
    assert p.coord.run_until_idle() == 1
    assert p.counts() == truth(acked)
    assert p.metrics.value("trident_records_total", pipeline="topology-1") == 300
    p.close()  # flushes the published offsets
    admin = AdminClient({"bootstrap.servers": kafka_peer.bootstrap_servers()})
    request = ConsumerGroupTopicPartitions("trident-topology-1", [TopicPartition(topic, i) for i in range(3)])
    [future] = admin.list_consumer_group_offsets([request], request_timeout=20).values()
    assert {tp.partition: tp.offset for tp in future.result().topic_partitions} == {0: 100, 1: 100, 2: 100}


def test_latest_counts_only_records_after_the_start(kafka_peer: KafkaPeer, pipelines: list[Pipeline]) -> None:
    """LATEST: records produced before the first batch are never counted, everything after is."""
    topic = _topic(kafka_peer)
    produce(kafka_peer.bootstrap_servers(), topic, spread(90, 3, tag="old"))
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic], first_poll=FirstPoll.LATEST))
    p.coord.run_until_idle()
    assert p.counts() == Counter()
    new = produce(kafka_peer.bootstrap_servers(), topic, spread(60, 3, tag="new"))
    p.coord.run_until_idle()
    assert p.counts() == truth(new)


def test_timestamp_after_the_log_counts_only_later_records(kafka_peer: KafkaPeer, pipelines: list[Pipeline]) -> None:
    """TIMESTAMP later than every existing record: like LATEST, only records produced afterwards count."""
    topic = _topic(kafka_peer, 2)
    produce(kafka_peer.bootstrap_servers(), topic, spread(20, 2, tag="old"), timestamps=[1000 + i for i in range(20)])
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic], first_poll=FirstPoll.TIMESTAMP,
                                    first_poll_timestamp_ms=10**6))
    p.coord.run_until_idle()
    new = produce(kafka_peer.bootstrap_servers(), topic, spread(10, 2, tag="new"))
    p.coord.run_until_idle()
    assert p.counts() == truth(new)


def test_restart_and_replayed_commit_count_nothing_twice(kafka_cluster: MockKafkaCluster,
                                                         pipelines: list[Pipeline]) -> None:
    """UNCOMMITTED_EARLIEST resumes after a restart; a commit failing once is replayed without double counting."""
    topic = _topic(kafka_cluster)
    bootstrap = kafka_cluster.bootstrap_servers()
    first = produce(bootstrap, topic, spread(150, 3, tag="a"))
    p = _pipeline(pipelines, config(bootstrap, topics=[topic]), caps=Caps(per_partition=20, per_batch=40))
    p.coord.run(max_batches=2)
    second = produce(bootstrap, topic, spread(90, 3, tag="b"))
    failed: list[int] = []

    def fail_once(point: str, txid: int) -> None:
        if point == "mark" and txid == 4 and not failed:
            failed.append(txid)
            raise RuntimeError("crash after the state writes, before marking txid 4 committed")

    coord = p.restart(faults=fail_once)
    coord.start()
    assert coord.committed_txid == 2
    coord.run_until_idle()
    assert failed == [4]
    assert p.counts() == truth(first) + truth(second)
    assert p.metrics.value("trident_batch_replays_total", pipeline="topology-1") >= 1


def test_caps_split_the_stream_into_bounded_batches(kafka_cluster: MockKafkaCluster, pipelines: list[Pipeline]) -> None:
    """Per-partition and per-batch caps: 300 records need at least 12 batches of <= 25, still counted once."""
    topic = _topic(kafka_cluster)
    acked = produce(kafka_cluster.bootstrap_servers(), topic, spread(300, 3))
    p = _pipeline(pipelines, config(kafka_cluster.bootstrap_servers(), topics=[topic]),
                  caps=Caps(per_partition=10, per_batch=25))
    batches = p.coord.run_until_idle()
    assert 12 <= batches <= 15
    assert p.counts() == truth(acked)


def test_regex_discovery_counts_a_topic_created_mid_run(kafka_peer: KafkaPeer, pipelines: list[Pipeline]) -> None:
    """A topic matching the pattern, created after the pipeline started, is discovered and counted."""
    prefix = unique_topic("rx")
    kafka_peer.create_topic(f"{prefix}-1", 2)
    bootstrap = kafka_peer.bootstrap_servers()
    one = produce(bootstrap, f"{prefix}-1", spread(40, 2, tag="one"))
    p = _pipeline(pipelines, config(bootstrap, topic_pattern=rf"{prefix}-\d+"))
    p.coord.run_until_idle()
    assert p.counts() == truth(one)
    kafka_peer.create_topic(f"{prefix}-2", 3)
    two = produce(bootstrap, f"{prefix}-2", spread(30, 3, tag="two"))
    p.coord.run_until_idle()
    assert p.counts() == truth(one) + truth(two)


def test_opaque_spout_commits_around_a_down_broker_and_catches_up(kafka_cluster: MockKafkaCluster,
                                                                  pipelines: list[Pipeline]) -> None:
    """Broker 2 down mid-stream: the other partitions keep committing, partition 1 resumes where it stopped."""
    topic = _topic(kafka_cluster, leaders=True)
    bootstrap = kafka_cluster.bootstrap_servers()
    before = produce(bootstrap, topic, spread(150, 3, tag="a"))
    p = _pipeline(pipelines, config(bootstrap, topics=[topic], request_timeout_s=1.0, read_timeout_s=1.0),
                  caps=Caps(per_partition=20, per_batch=60))
    p.coord.run(max_batches=1)
    kafka_cluster.broker_down(2)
    during = produce(bootstrap, topic, [(pt, v) for pt, v in spread(60, 3, tag="b") if pt != 1])
    p.coord.run_until_idle()
    part1 = [r for r in before if r.partition == 1]
    n = _prefix_matches(p.counts(), [r for r in before + during if r.partition != 1], part1)
    assert n == 20  # partition 1: only what the batch before the outage read; the rest all counted
    kafka_cluster.broker_up(2)
    p.coord.run_until_idle()
    assert p.counts() == truth(before) + truth(during)


def test_transactional_spout_waits_for_a_down_broker(kafka_cluster: MockKafkaCluster,
                                                     pipelines: list[Pipeline]) -> None:
    """Broker 2 down: the transactional spout commits nothing more (each step fails); once up, all is counted once."""
    topic = _topic(kafka_cluster, leaders=True)
    bootstrap = kafka_cluster.bootstrap_servers()
    acked = produce(bootstrap, topic, spread(120, 3))
    p = _pipeline(pipelines, config(bootstrap, topics=[topic], request_timeout_s=0.5, read_timeout_s=0.5),
                  transactional=True, caps=Caps(per_partition=20, per_batch=60))
    p.coord.run(max_batches=1)
    committed = p.counts()
    assert sum(committed.values()) == 60
    kafka_cluster.broker_down(2)
    assert [p.coord.step() for _ in range(3)] == ["failed"] * 3
    assert p.counts() == committed
    assert p.coord.committed_txid == 1
    kafka_cluster.broker_up(2)
    p.coord.run_until_idle()
    assert p.counts() == truth(acked)


def test_leader_moves_mid_stream_lose_and_duplicate_nothing(kafka_cluster: MockKafkaCluster,
                                                            pipelines: list[Pipeline]) -> None:
    """Every partition's leader moves between batches; reading follows the new leaders, counts stay exact."""
    topic = _topic(kafka_cluster, leaders=True)
    bootstrap = kafka_cluster.bootstrap_servers()
    before = produce(bootstrap, topic, spread(150, 3, tag="a"))
    p = _pipeline(pipelines, config(bootstrap, topics=[topic]), caps=Caps(per_partition=20, per_batch=60))
    p.coord.run(max_batches=2)
    for part in range(3):
        kafka_cluster.set_leader(topic, part, (part + 1) % 3 + 1)
    assert kafka_cluster.leaders(topic) == {0: 2, 1: 3, 2: 1}
    after = produce(bootstrap, topic, spread(60, 3, tag="b"))
    p.coord.run_until_idle()
    assert p.counts() == truth(before) + truth(after)


def test_retention_past_the_stored_offset_fails_by_default(kafka_peer: KafkaPeer, pipelines: list[Pipeline]) -> None:
    """Records deleted before they were read stop the pipeline with DataLossError; nothing more is committed."""
    topic = _topic(kafka_peer)
    produce(kafka_peer.bootstrap_servers(), topic, spread(150, 3))
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic]),
                  caps=Caps(per_partition=10, per_batch=1000))
    p.coord.run(max_batches=1)
    committed = p.counts()
    kafka_peer.delete_records(topic, 0, 25)
    with pytest.raises(DataLossError) as info:
        p.coord.run_until_idle()
    assert (info.value.next_offset, info.value.log_start) == (10, 25)
    assert p.counts() == committed


def test_retention_past_the_stored_offset_skips_with_policy_skip(kafka_peer: KafkaPeer,
                                                                 pipelines: list[Pipeline]) -> None:
    """Policy SKIP: the pipeline continues at the log start; exactly the deleted, unread records are missing."""
    topic = _topic(kafka_peer)
    acked = produce(kafka_peer.bootstrap_servers(), topic, spread(150, 3))
    metrics = SpoutMetrics(CollectorRegistry())
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], data_loss=DataLossPolicy.SKIP)
    pipelines.append(Pipeline(KafkaSpout(cfg, "topology-1", metrics), caps=Caps(per_partition=10, per_batch=1000)))
    p = pipelines[-1]
    p.coord.run(max_batches=1)
    kafka_peer.delete_records(topic, 0, 25)
    p.coord.run_until_idle()
    lost = [r for r in acked if r.partition == 0 and 10 <= r.offset < 25]
    assert p.counts() == truth(acked) - truth(lost)
    assert metrics.value("trident_data_loss_offsets_total", pipeline="topology-1", topic=topic, partition="0") == 15


def _transactions(bootstrap: str, topic: str, batches: list[tuple[list[tuple[int, bytes]], bool]]) -> None:
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx")})
    tx.init_transactions(30)
    for records, commit in batches:
        tx.begin_transaction()
        for part, value in records:
            tx.produce(topic, value, partition=part)
        tx.flush(30)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)


def test_transactionally_produced_topic_counts_committed_records_once(kafka_peer: KafkaPeer,
                                                                      pipelines: list[Pipeline]) -> None:
    """Transaction markers in every partition and small caps: ranges end on markers, records count once."""
    topic = _topic(kafka_peer, 2)
    batches = [(spread(7, 2, tag=f"t{i}-"), True) for i in range(6)]
    _transactions(kafka_peer.bootstrap_servers(), topic, batches)
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic]),
                  caps=Caps(per_partition=4, per_batch=6))
    p.coord.run_until_idle()
    expected = Counter(v.decode() for records, _ in batches for _, v in records)
    assert p.counts() == expected
    assert p.metrics.value("trident_records_total", pipeline="topology-1") == 42


def test_aborted_transactions_are_never_counted(kafka_peer: KafkaPeer, pipelines: list[Pipeline]) -> None:
    """read_committed end to end: aborted records never reach the counts, committed ones count once."""
    if not READ_COMMITTED[kafka_peer.kind]:
        skip_mock_gap("librdkafka's mock serves aborted records to read_committed consumers (no LSO, no "
                    "aborted-transaction list); checked by test_mock_gaps_still_hold")
    topic = _topic(kafka_peer, 2)
    batches = [(spread(6, 2, tag=f"t{i}-"), i % 2 == 0) for i in range(6)]
    _transactions(kafka_peer.bootstrap_servers(), topic, batches)
    p = _pipeline(pipelines, config(kafka_peer.bootstrap_servers(), topics=[topic]),
                  caps=Caps(per_partition=4, per_batch=6))
    p.coord.run_until_idle()
    assert p.counts() == Counter(v.decode() for records, ok in batches if ok for _, v in records)
