"""Positions are never forgotten by accident: a partition's last committed position survives any number of txids
that do not read it (its topic missing, deleted, no longer matched), and a log that restarts below it is data loss
under the pipeline's policy. Peer: the in-memory source (topics vanish and come back on demand); the same cases on
a real Kafka are in tests/kafka/test_positions.py."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.coordinator.progress import read_progress
from app.failures.policy import FAILED
from spouts.errors import LogRestartedError
from spouts.memory import MemorySpout
from spouts.metadata import Partition
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.spec import StateKind
from tests.app.harness import TOPIC, World

OTHER = "other"
TOPICS = (TOPIC, OTHER)
PARTS = [Partition(t, p) for t in TOPICS for p in range(2)]


def two_topic_world(retention: int = 2) -> World:
    """Two topics of two partitions each; caps small enough that a handful of records takes several txids."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2, retention=retention,
                  caps=Caps(per_partition=2, per_batch=3))
    for p in range(2):
        world.source.add_partition(Partition(OTHER, p))
    return world


def listed(world: World, topic: str, on: bool) -> None:
    for p in range(2):
        world.source.set_listed(Partition(topic, p), on)


def positions(world: World) -> dict[Partition, int]:
    plan = read_progress(world.store).committed_plan
    return {} if plan is None else {p: m.next_offset for p, m in plan.partitions.items()}


action = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(PARTS), st.sampled_from("abc")),
    st.tuples(st.just("append"), st.sampled_from(PARTS), st.sampled_from("abc")),
    st.tuples(st.just("step")), st.tuples(st.just("step")), st.tuples(st.just("step")),
    st.tuples(st.just("listed"), st.sampled_from(TOPICS), st.booleans()),
    st.tuples(st.just("restart")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, max_size=40))
def test_positions_never_regress_nor_reset_while_topics_vanish_and_return(actions: list[tuple[Any, ...]]) -> None:
    """Whatever txids run while a topic is missing (more than the retention keeps), every partition read once
    keeps its position and continues from it; at the end every record of every log was counted exactly once."""
    world = two_topic_world()
    seen: dict[Partition, int] = {}
    try:
        for a in actions:
            match a:
                case ("append", p, key):
                    world.source.append(p, None, key.encode())
                case ("step",):
                    world.coordinator.step()
                case ("listed", topic, on):
                    listed(world, topic, on)
                case ("restart",):
                    world.restart()
            now = positions(world)
            assert set(seen) <= set(now), f"positions forgotten: {sorted(set(seen) - set(now))}"
            assert all(now[p] >= o for p, o in seen.items()), f"a position went back: {seen} -> {now}"
            seen = now
        for topic in TOPICS:
            listed(world, topic, True)
        world.coordinator.run_until_idle()
        assert world.stored_counts() == world.truth()
        assert positions(world) == {p: len(world.source._logs[p].records) for p in world.source.partitions()}
    finally:
        world.coordinator.close()


def test_a_missing_topic_commits_no_txid_and_comes_back_where_it_was() -> None:
    """The typo case: the only topic listed is missing, so no txid commits (nothing churns the store); then
    the right topic's partitions continue from their stored positions, never from the first poll again."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2, retention=2)
    for i in range(10):
        world.append(i % 2, "the")
    world.coordinator.run_until_idle()
    committed = world.coordinator.committed_txid
    listed(world, TOPIC, False)
    assert world.coordinator.run_until_idle() == 0
    world.restart()
    assert world.coordinator.run_until_idle() == 0
    assert world.coordinator.committed_txid == committed
    listed(world, TOPIC, True)
    world.append(0, "the")
    world.restart()
    world.coordinator.run_until_idle()
    assert world.stored_counts() == world.truth() == {"the": 11}


def test_a_topic_missing_for_longer_than_the_retention_keeps_its_position() -> None:
    """One topic missing while the other commits more txids than the retention keeps: the missing one's
    position is carried by every txid, so it is neither read again from the start nor skipped."""
    world = two_topic_world(retention=2)
    for i in range(8):
        world.source.append(PARTS[i % 2], None, b"x")
    world.coordinator.run_until_idle()
    before = positions(world)
    listed(world, TOPIC, False)
    for i in range(12):
        world.source.append(PARTS[2 + i % 2], None, b"y")
    assert world.coordinator.run_until_idle() > 2  # more txids than the retention keeps
    assert {p: positions(world)[p] for p in PARTS[:2]} == {p: before[p] for p in PARTS[:2]}
    listed(world, TOPIC, True)
    world.coordinator.run_until_idle()
    assert world.stored_counts() == world.truth() == {"x": 8, "y": 12}


def recreated_world(policy: DataLossPolicy) -> tuple[World, Counter[str]]:
    """Topic ``events`` (1 partition) read to offset 6, then deleted and re-created with 4 new records."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=100, per_batch=100))
    spout = world.coordinator.spout
    assert isinstance(spout, MemorySpout)
    spout.data_loss = policy
    world.coordinator._emitter = spout.emitter()
    for _ in range(6):
        world.append(0, "old")
    world.coordinator.run_until_idle()
    old = Counter((r.value or b"").decode() for r in world.source.recreate(Partition(TOPIC, 0)))
    for _ in range(4):
        world.append(0, "new")
    return world, old


def test_a_recreated_topic_under_fail_stops_the_pipeline_naming_the_partition() -> None:
    world, _ = recreated_world(DataLossPolicy.FAIL)
    with pytest.raises(LogRestartedError, match=f"data loss on {TOPIC}:0: the stored next offset is 6 but the log "
                                                f"ends at 4"):
        world.coordinator.step()
    stopped = world.coordinator.stopped_by
    assert stopped is not None
    assert stopped.permanent
    assert stopped.exit_code == FAILED
    assert stopped.cause == "data_loss"


def test_a_recreated_topic_under_skip_reads_the_new_log_from_its_start() -> None:
    world, old = recreated_world(DataLossPolicy.SKIP)
    world.coordinator.run_until_idle()
    emitter = world.coordinator._emitter
    assert getattr(emitter, "restarts", None) == 1
    assert world.stored_counts() == old + Counter(world.truth()) == {"old": 6, "new": 4}
