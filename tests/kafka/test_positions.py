"""Positions through ordinary mistakes, on a real Kafka: a misspelled topic, a topic dropped from the config for
longer than the metadata retention, a topic deleted and re-created (below or past the stored position), a
position stored without a topic id (an older version), a log truncated under the position.

The coordinator is driven in-process (LocalExecutor, state in memory): what is under test is where each txid
starts reading, which Spark does not decide. Stored counts are compared with what the producer was acknowledged.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import cast

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
from prometheus_client import CollectorRegistry

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.coordinator.progress import read_progress
from app.failures.policy import FAILED
from app.metrics import Metrics
from app.topology.local import LocalExecutor, Sink
from spouts.errors import LogRestartedError, TopicRecreatedError
from spouts.kafka import FirstPoll, KafkaSpout
from spouts.kafka.emitter import KafkaEmitter
from spouts.kafka.topic_ids import NO_IDS, TopicIds
from spouts.metadata import Partition, PartitionMetadata
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy
from states import Count, OpaqueMap
from states.memory import MemoryBackingMap, MemoryTransactionalStateStore
from tests.kafka.fixtures import KafkaPeer, skip_mock_gap, unique_topic
from tests.kafka.helpers import config, produce, spread, truth

RETENTION = 2  # txids of metadata kept: the smallest the coordinator accepts


class Runs:
    """One pipeline id whose config changes between runs; its store and state outlive every run."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.store = MemoryTransactionalStateStore("words")
        self.backing = MemoryBackingMap()
        self.metrics = Metrics(CollectorRegistry())
        self.coord: Coordinator | None = None

    def start(self, topics: list[str], *, data_loss: DataLossPolicy = DataLossPolicy.FAIL,
              per_partition: int = 100, faults: Callable[[str, int], None] | None = None) -> Coordinator:
        self.close()
        cfg = config(self.bootstrap, topics=topics, first_poll=FirstPoll.EARLIEST, data_loss=data_loss)
        spout = KafkaSpout(cfg, "words", metrics=self.metrics.spouts)
        executor = LocalExecutor(spout.emitter(), [Sink(OpaqueMap(self.backing), Count(),
                                                        key=lambda r: (r.value.decode(),))])
        settings = CoordinatorConfig(caps=Caps(per_partition=per_partition, per_batch=1000), retention=RETENTION,
                                     retry_backoff_s=(0.01, 0.05), idle_sleep_s=0.01, owner="test")
        self.coord = Coordinator("words", spout, executor, self.store, settings, metrics=self.metrics, faults=faults)
        self.coord.start()
        return self.coord

    def counts(self) -> Counter[str]:
        return Counter({cast(tuple[str], k)[0]: v.curr for k, v in self.backing.data.items()})

    def positions(self) -> dict[Partition, int]:
        plan = read_progress(self.store).committed_plan
        return {} if plan is None else {p: m.next_offset for p, m in plan.partitions.items()}

    def close(self) -> None:
        if self.coord is not None:
            self.coord.close()
            self.coord = None


@pytest.fixture
def runs(kafka_peer: KafkaPeer) -> Iterator[Runs]:
    made = Runs(kafka_peer.bootstrap_servers())
    yield made
    made.close()


def test_a_misspelled_topic_never_makes_the_right_one_count_again(kafka_peer: KafkaPeer, runs: Runs) -> None:
    """The right topic, then a misspelled one (no txid commits), then the misspelled one beside another topic for
    more txids than the retention keeps, then the right topic again: every record counted once."""
    sentences, other = unique_topic("sentences"), unique_topic("other")
    kafka_peer.create_topic(sentences, 2)
    kafka_peer.create_topic(other, 1)
    first = produce(runs.bootstrap, sentences, spread(40, 2, tag="s"))
    runs.start([sentences]).run_until_idle()
    assert runs.counts() == truth(first)
    stored = runs.positions()
    assert stored == {Partition(sentences, 0): 20, Partition(sentences, 1): 20}
    committed = read_progress(runs.store).committed_txid

    typo = unique_topic("no_such_topic")
    for _ in range(3):  # restarts with the typo: it waits, and commits nothing
        assert runs.start([typo]).run_until_idle() == 0
    assert read_progress(runs.store).committed_txid == committed

    meanwhile = produce(runs.bootstrap, other, spread(12, 1, tag="o"))
    assert runs.start([typo, other], per_partition=3).run_until_idle() > RETENTION  # 4 txids without sentences
    assert {p: o for p, o in runs.positions().items() if p.topic == sentences} == stored

    later = produce(runs.bootstrap, sentences, spread(10, 2, tag="s"))
    runs.start([sentences, other]).run_until_idle()
    assert runs.counts() == truth(first) + truth(meanwhile) + truth(later)


def topic_id(bootstrap: str, topic: str) -> str:
    """The topic's id as the cluster tells it now (asked independently of the spout)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_topics(TopicCollection([topic]), request_timeout=10).values()
    return str(future.result().topic_id)


def needs_topic_ids(kafka_peer: KafkaPeer) -> None:
    """Ids tell logs apart on a real Kafka; the shared mock peer names no controller (test_topic_ids.py has its
    own mock cases, with and without ids)."""
    if kafka_peer.kind == "mock":
        skip_mock_gap("the mock peer answers no DescribeTopics (no controller): topic ids are unknown there")


def recreate(kafka_peer: KafkaPeer, topic: str, partitions: int, timeout_s: float = 60.0) -> None:
    """Delete ``topic`` and create it again (deletion finishes asynchronously: retry the creation)."""
    kafka_peer.delete_topic(topic)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            kafka_peer.create_topic(topic, partitions)
            return  # noqa: TRY300  the return ends the retry loop
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def step_until_counted(coord: Coordinator, runs: Runs, expected: Counter[str], deadline: float) -> None:
    """Steps ``coord`` one txid at a time until the stored counts are ``expected`` (a replay failing for ever
    must not hang the test), then asserts they are."""
    while runs.counts() != expected and time.monotonic() < deadline:
        if coord.step() != "committed":
            time.sleep(0.05)
    assert runs.counts() == expected


@pytest.mark.parametrize("restarted", [True, False], ids=["while-stopped", "while-running"])
@pytest.mark.parametrize("new_records", [20, 50], ids=["below", "grown-past"])
@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_a_topic_deleted_and_recreated_under_the_stored_position_is_data_loss(
        kafka_peer: KafkaPeer, runs: Runs, policy: DataLossPolicy, new_records: int, restarted: bool) -> None:
    """Read to offset 30, then the topic is re-created with 20 records, or with 50 (grown past the position before
    the pipeline looks), while the pipeline is stopped or between two of its steps: under fail the pipeline stops
    for good naming the topic and both ids; under skip the loss is counted once and the new log is read from its
    start, every record once."""
    needs_topic_ids(kafka_peer)
    topic = unique_topic("recreated")
    kafka_peer.create_topic(topic, 1)
    old = produce(runs.bootstrap, topic, spread(30, 1, tag="old"))
    coord = runs.start([topic], data_loss=policy)
    coord.run_until_idle()
    assert runs.counts() == truth(old)
    if restarted:
        runs.close()
    old_id = topic_id(runs.bootstrap, topic)
    recreate(kafka_peer, topic, 1)
    new = produce(runs.bootstrap, topic, spread(new_records, 1, tag="new"))
    new_id = topic_id(runs.bootstrap, topic)
    assert new_id != old_id
    if restarted:
        coord = runs.start([topic], data_loss=policy)
    events = {"pipeline": "words", "topic": topic, "partition": "0", "policy": policy.value}
    deadline = time.monotonic() + 60
    if policy is DataLossPolicy.FAIL:
        with pytest.raises(TopicRecreatedError, match=re.escape(  # noqa: PT012  the block is the step under test
                f"data loss on {topic}:0: topic {topic} was re-created (its id was {old_id}, now {new_id})")):
            while time.monotonic() < deadline:  # until the spout's metadata sees the new topic
                coord.step()
                time.sleep(0.05)
        stopped = coord.stopped_by
        assert stopped is not None
        assert stopped.exit_code == FAILED
        assert stopped.cause == "data_loss"
        assert f"{topic}:0" in stopped.reason
        assert "\n" not in stopped.reason
        assert runs.counts() == truth(old)
    else:
        step_until_counted(coord, runs, truth(old) + truth(new), deadline)
        more = produce(runs.bootstrap, topic, spread(5, 1, tag="more"))
        coord.run_until_idle()
        assert runs.counts() == truth(old) + truth(new) + truth(more)
        assert runs.positions() == {Partition(topic, 0): new_records + 5}
        said = coord.last_data_loss  # what /readyz shows beside the pipeline's state
        assert said is not None
        assert f"{topic}:0 re-created (topic id {old_id} -> {new_id}) under the stored next offset 30" in said
    assert runs.metrics.value("trident_data_loss_events_total", **events) == 1


def fail_commit_once(point: str, txid: int) -> None:
    """Fails the first commit (after the freeze, before any state write), like a crash there."""
    if point == "commit" and txid == 2:
        raise RuntimeError("crash before the commit of txid 2")


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_a_topic_recreated_under_a_frozen_txid_is_data_loss(kafka_peer: KafkaPeer, runs: Runs,
                                                           policy: DataLossPolicy) -> None:
    """Txid 2 is frozen on [30, 40) and never committed; the topic is then re-created with 20 records: the replay
    stops for good (fail), or stores an empty range at the new log's start and reads the new log (skip)."""
    needs_topic_ids(kafka_peer)
    topic = unique_topic("frozen")
    kafka_peer.create_topic(topic, 1)
    old = produce(runs.bootstrap, topic, spread(30, 1, tag="old"))
    runs.start([topic], data_loss=policy).run_until_idle()
    produce(runs.bootstrap, topic, spread(10, 1, tag="lost"))
    coord = runs.start([topic], data_loss=policy, faults=fail_commit_once)
    assert coord.step() == "failed"
    frozen = read_progress(runs.store).frozen
    assert frozen is not None
    assert frozen.txid == 2
    recreate(kafka_peer, topic, 1)
    new = produce(runs.bootstrap, topic, spread(20, 1, tag="new"))
    coord = runs.start([topic], data_loss=policy)
    deadline = time.monotonic() + 60
    if policy is DataLossPolicy.FAIL:
        with pytest.raises(TopicRecreatedError, match=f"data loss on {topic}:0: topic {topic} was re-created .*"  # noqa: PT012  the block is the step under test
                                                      "the stored next offset 40 belongs to the old log"):
            while time.monotonic() < deadline:
                coord.step()
        assert runs.counts() == truth(old)
    else:
        step_until_counted(coord, runs, truth(old) + truth(new), deadline)
        assert runs.positions() == {Partition(topic, 0): 20}


def test_positions_stored_without_topic_ids_load_and_adopt_the_current_id(
        kafka_peer: KafkaPeer, runs: Runs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Positions stored by a version that kept no topic ids (the spout made blind to ids for the first run) load;
    the next run adopts the topic's id (saying so), counts every record once, and then tells a re-creation
    that grew past the position (fail: stops naming both ids)."""
    needs_topic_ids(kafka_peer)
    topic = unique_topic("upgrade")
    kafka_peer.create_topic(topic, 1)
    first = produce(runs.bootstrap, topic, spread(30, 1, tag="a"))
    with monkeypatch.context() as blind:
        blind.setattr(TopicIds, "ask", lambda self, topics: NO_IDS)
        runs.start([topic]).run_until_idle()
    stored = read_progress(runs.store).committed_plan
    assert stored is not None
    assert [m.topic_id for m in stored] == [None]
    assert "topic_id" not in stored.to_json()["partitions"][f"{topic}:0"]  # the previous version's form
    runs.close()

    later = produce(runs.bootstrap, topic, spread(10, 1, tag="b"))
    current = topic_id(runs.bootstrap, topic)
    with caplog.at_level(logging.INFO, logger="spouts.kafka.emitter"):
        runs.start([topic]).run_until_idle()
    assert runs.counts() == truth(first) + truth(later)
    assert f"{topic}:0: the stored position carries no topic id" in caplog.text
    assert f"adopting the topic's current id {current}" in caplog.text
    adopted = read_progress(runs.store).committed_plan
    assert adopted is not None
    assert [(m.next_offset, m.topic_id) for m in adopted] == [(40, current)]
    runs.close()

    recreate(kafka_peer, topic, 1)
    produce(runs.bootstrap, topic, spread(60, 1, tag="c"))
    coord = runs.start([topic])
    with pytest.raises(TopicRecreatedError, match=re.escape(f"its id was {current}, now ")):
        coord.step()
    assert runs.counts() == truth(first) + truth(later)


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_a_log_truncated_under_the_position_with_the_same_id_is_never_read_again(
        kafka_peer: KafkaPeer, policy: DataLossPolicy) -> None:
    """A position past the log's end in a log of the same topic id (what an unclean leader election leaves: the
    new leader's log ends below what was read): fail raises; skip continues at the log end, not at its start."""
    needs_topic_ids(kafka_peer)
    topic = unique_topic("truncated")
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30, 1))
    emitter = KafkaEmitter(config(kafka_peer.bootstrap_servers(), topics=[topic], data_loss=policy), "words")
    p = Partition(topic, 0)
    read_past = PartitionMetadata(topic, 0, 35, 40, 5, "words", topic_id(kafka_peer.bootstrap_servers(), topic))
    with emitter.planning([p]):
        if policy is DataLossPolicy.FAIL:
            with pytest.raises(LogRestartedError, match="stored next offset is 40 but the log ends at 30"):
                emitter.plan_partition(p, read_past, 100)
            return
        planned = emitter.plan_partition(p, read_past, 100)
    assert planned is not None
    assert (planned.first_offset, planned.next_offset, planned.topic_id) == (30, 30, read_past.topic_id)
    assert emitter.last_data_loss is not None
    assert "truncated below the stored next offset 40 to 30" in emitter.last_data_loss


@pytest.mark.parametrize("policy", [DataLossPolicy.FAIL, DataLossPolicy.SKIP])
def test_a_frozen_range_past_the_end_of_a_truncated_log_keeps_what_is_left(kafka_peer: KafkaPeer,
                                                                           policy: DataLossPolicy) -> None:
    """A frozen range [25, 40) in a log of the same id that now ends at 30 (truncated): fail raises; skip replays
    [25, 30), what the log kept of it, rather than an empty range at the log's start."""
    needs_topic_ids(kafka_peer)
    topic = unique_topic("truncfrozen")
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30, 1))
    emitter = KafkaEmitter(config(kafka_peer.bootstrap_servers(), topics=[topic], data_loss=policy), "words")
    frozen = PartitionMetadata(topic, 0, 25, 40, 15, "words", topic_id(kafka_peer.bootstrap_servers(), topic))
    if policy is DataLossPolicy.FAIL:
        with pytest.raises(LogRestartedError, match="stored next offset is 40 but the log ends at 30"):
            emitter.replan_frozen(frozen)
        return
    replayed = emitter.replan_frozen(frozen)
    assert (replayed.first_offset, replayed.next_offset, replayed.record_count, replayed.topic_id) == \
        (25, 30, 5, frozen.topic_id)
    assert [r.offset for r in emitter.emit_partition(replayed)] == list(range(25, 30))


def test_a_plan_sends_one_topic_id_request_for_all_its_topics(kafka_peer: KafkaPeer) -> None:
    """Ids cost one DescribeTopics request per plan, whatever the number of partitions and topics."""
    needs_topic_ids(kafka_peer)
    topics = [unique_topic("ids"), unique_topic("ids")]
    for t in topics:
        kafka_peer.create_topic(t, 3)
    emitter = KafkaEmitter(config(kafka_peer.bootstrap_servers(), topics=topics), "words")
    partitions = [Partition(t, i) for t in topics for i in range(3)]
    with emitter.planning(partitions):
        planned = [emitter.plan_partition(p, None, 10) for p in partitions]
    assert emitter.topic_ids.requests == 1
    ids = {t: topic_id(kafka_peer.bootstrap_servers(), t) for t in topics}
    assert [m.topic_id for m in planned if m is not None] == [ids[p.topic] for p in partitions]
