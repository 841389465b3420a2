"""The batch coordinator's protocol, scenario by scenario (the property test explores the rest)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.coordinator.loop import Outcome
from app.coordinator.progress import StoredBatch
from app.failures.errors import MissingBatchMetadataError
from app.failures.policy import Failure, FailurePolicy
from app.topology.batch import Batch, BatchLifecycleError, BatchStatus, CommitStats
from app.topology.guarantees import CombinationError, Guarantee, check_combination
from spouts.errors import DataLossError
from spouts.memory import MemorySpout
from spouts.metadata import BatchPlan, Partition
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.errors import LeaseHeldError, LeaseLostError
from states.spec import StateKind
from tests.app.harness import TOPIC, InjectedFault, World


class NoFreeze(Coordinator):
    """The coordinator with step 3 removed: plans are stored after the state writes, as pure Trident does."""

    def _freeze(self, txid: int, plan: BatchPlan, attempt: int) -> None:
        pass  # nothing stored before the commit

    def _mark_committed(self, batch: Batch) -> None:
        super()._freeze(batch.txid, batch.plan, batch.attempt)
        super()._mark_committed(batch)


def stored(world: World, key: str) -> dict[str, Any]:
    """A document the coordinator stored (it must be there)."""
    doc = world.store.get(key)
    assert isinstance(doc, dict)
    return doc


def step_until_idle(world: World, limit: int = 200) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for _ in range(limit):
        outcomes.append(world.coordinator.step())
        if outcomes[-1] == "idle":
            return outcomes
    raise AssertionError(f"not idle after {limit} steps: {outcomes[-5:]}")


def partial_commit_then_lose_partition(coordinator_class: type[Coordinator]) -> World:
    """Attempt 1 of txid 1 writes key j and fails; j's partition then goes away for attempt 2."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2, coordinator_class=coordinator_class)
    world.append(0, "j")
    world.append(1, "k")
    world.backing.fail_after = 1  # the second single-key write of the commit fails
    assert world.coordinator.step() == "failed"
    assert world.stored_counts() == {"j": 1}
    world.source.set_available(Partition(TOPIC, 0), False)
    world.coordinator.step()
    world.source.set_available(Partition(TOPIC, 0), True)
    step_until_idle(world)
    return world


class TestFreeze:
    def test_freeze_closes_the_partial_commit_window(self) -> None:
        """With the plan frozen before the first write, the replay re-reads j's partition: exact counts."""
        world = partial_commit_then_lose_partition(Coordinator)
        assert world.stored_counts() == world.truth() == {"j": 1, "k": 1}

    def test_without_freeze_the_window_double_counts(self) -> None:
        """The same failures without step 3 count j twice: the test above is what catches its removal."""
        world = partial_commit_then_lose_partition(NoFreeze)
        assert world.stored_counts() == {"j": 2, "k": 1}
        assert world.truth() == {"j": 1, "k": 1}

    def test_frozen_plan_is_reused_after_restart_even_if_more_data_arrived(self) -> None:
        """A frozen-but-uncommitted txid is re-run from its stored ranges by a new coordinator."""
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=100, per_batch=100))
        for k in "aab":
            world.append(0, k)
        world.faults.armed = {"commit"}
        assert world.coordinator.step() == "failed"  # frozen, then failed before any write
        frozen = StoredBatch.from_json(stored(world, "batches/" + "1".zfill(20))).plan
        for k in "bbb":
            world.append(0, k)
        world.restart()
        world.coordinator.step()
        assert world.coordinator.committed_txid == 1
        assert StoredBatch.from_json(stored(world, "batches/" + "1".zfill(20))).plan == frozen
        assert world.stored_counts() == {"a": 2, "b": 1}
        step_until_idle(world)
        assert world.stored_counts() == world.truth() == {"a": 2, "b": 4}


class TestAtLeastOnce:
    def test_non_transactional_map_double_counts_a_replayed_partial_commit(self) -> None:
        """A commit that fails after one key write is replayed: that key is counted twice (at-least-once)."""
        world = World(SpoutKind.OPAQUE, StateKind.NON_TRANSACTIONAL, partitions=1, accept_at_least_once=True)
        for k in "ab":
            world.append(0, k)
        world.backing.fail_after = 1
        assert world.coordinator.step() == "failed"
        step_until_idle(world)
        assert world.stored_counts() == {"a": 2, "b": 1}
        assert world.truth() == {"a": 1, "b": 1}

    def test_opaque_map_under_the_same_failure_is_exact(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        for k in "ab":
            world.append(0, k)
        world.backing.fail_after = 1
        assert world.coordinator.step() == "failed"
        step_until_idle(world)
        assert world.stored_counts() == world.truth() == {"a": 1, "b": 1}


class RecordingExecutor:
    """Wraps an executor and records when each txid's process and commit start and end.

    ``hold(batch)`` runs at the start of every process call: tests block there on events and barriers
    to pin down which work overlaps, instead of sleeping and hoping."""

    def __init__(self, inner: Any, hold: Callable[[Batch], None] | None = None,
                 fail_commit_of: set[int] | None = None) -> None:
        self.inner, self.hold, self.fail_commit_of = inner, hold, fail_commit_of or set()
        self.events: list[tuple[str, int, int]] = []
        self.cancelled: list[int] = []
        self._lock = threading.Lock()

    def _log(self, what: str, batch: Batch) -> None:
        with self._lock:
            self.events.append((what, batch.txid, batch.attempt))

    def state_kinds(self) -> list[Any]:
        return self.inner.state_kinds()

    def process(self, batch: Batch) -> Any:
        self._log("process-start", batch)
        if self.hold is not None:
            self.hold(batch)
        out = self.inner.process(batch)
        self._log("process-end", batch)
        return out

    def commit(self, batch: Batch, processed: Any) -> CommitStats:
        self._log("commit-start", batch)
        if batch.txid in self.fail_commit_of:
            self.fail_commit_of.discard(batch.txid)
            raise InjectedFault(f"commit of {batch.txid}")
        out = self.inner.commit(batch, processed)
        self._log("commit-end", batch)
        return out

    def cancel(self, txid: int) -> None:
        self.cancelled.append(txid)
        self.inner.cancel(txid)

    def close(self) -> None:
        self.events.append(("close", 0, 0))
        self.inner.close()


def recorded_world(max_pending: int, **executor_args: Any) -> tuple[World, RecordingExecutor]:
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2, max_pending=max_pending,
                  caps=Caps(per_partition=2, per_batch=3))
    for i in range(24):
        world.append(i % 2, "abc"[i % 3])
    rec = RecordingExecutor(world.coordinator.executor, **executor_args)
    world.coordinator.executor = rec
    return world, rec


class TestOrdering:
    def test_commits_are_strictly_ordered_and_processing_overlaps(self) -> None:
        """With max_pending=3, later txids are processed while earlier ones commit, but commits go 1, 2, 3, …"""
        first_three = threading.Barrier(3, timeout=30)

        def hold(batch: Batch) -> None:  # txids 1-3 each finish processing only once all three are processing
            if batch.txid <= 3 and batch.attempt == 1:
                first_three.wait()

        world, rec = recorded_world(3, hold=hold)
        step_until_idle(world)
        assert not first_three.broken
        commits = [t for what, t, _ in rec.events if what == "commit-start"]
        assert commits == sorted(commits) == list(range(1, len(commits) + 1))
        first_commit = next(i for i, e in enumerate(rec.events) if e[0] == "commit-end")
        started_before = {t for what, t, _ in rec.events[:first_commit] if what == "process-start"}
        assert {2, 3} <= started_before  # txids 2 and 3 were being processed before txid 1 committed
        assert world.stored_counts() == world.truth()

    def test_a_failed_txid_fails_every_later_in_flight_txid(self) -> None:
        """Commit of txid 2 fails: txids 3 and 4, already processed, are replayed after 2 (attempt 2)."""
        world, rec = recorded_world(3, fail_commit_of={2})
        step_until_idle(world)
        commits = [(t, a) for what, t, a in rec.events if what == "commit-end"]
        assert [t for t, _ in commits] == list(range(1, len(commits) + 1))
        assert dict(commits)[2] == 2
        assert dict(commits)[3] == 2
        assert dict(commits)[4] == 2
        assert world.metrics.value("trident_batches_total", pipeline="world", outcome="failed") == 1
        assert world.stored_counts() == world.truth()

    def test_batch_lifecycle_guards_reuse(self) -> None:
        """A failed attempt cannot be committed; a committed one cannot fail."""
        b = Batch(1, 1, BatchPlan(1, {}), frozen=False)
        b.advance(BatchStatus.FAILED)
        with pytest.raises(BatchLifecycleError):
            b.advance(BatchStatus.PROCESSED)
        c = Batch(1, 1, BatchPlan(1, {}), frozen=False)
        c.advance(BatchStatus.PROCESSED)
        c.advance(BatchStatus.COMMITTED)
        with pytest.raises(BatchLifecycleError):
            c.advance(BatchStatus.FAILED)


class TestRestartAndLease:
    def test_a_store_without_the_committed_plan_stops_with_a_typed_error(self) -> None:
        """The plan of the last committed txid removed from the store: the next plan cannot know where to
        resume, and says so by type (permanent), naming the txid."""
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=2, per_batch=2))
        for k in "abcd":
            world.append(0, k)
        world.coordinator.run(max_batches=1)
        world.restart()
        epoch = world.store.lease_info().epoch  # type: ignore[union-attr]
        world.store.delete(["batches/" + "1".zfill(20)], epoch=epoch)
        world.append(0, "e")
        with pytest.raises(MissingBatchMetadataError) as e:
            world.coordinator.step()
        assert e.value.txid == 1
        assert FailurePolicy().decide(Failure(e.value, 2, 1)).permanent

    def test_restart_resumes_after_the_last_committed_txid(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=2, per_batch=2))
        for k in "abcdef":
            world.append(0, k)
        world.coordinator.run(max_batches=2)
        world.restart()
        assert world.coordinator.committed_txid == 2
        step_until_idle(world)
        assert world.coordinator.committed_txid == 3
        assert world.stored_counts() == world.truth()

    def test_attempt_numbers_survive_a_restart(self, caplog: pytest.LogCaptureFixture) -> None:
        """A frozen txid replayed after a crash is attempt 2, and 3 after a second crash: logs and metrics say so."""
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        caplog.set_level(logging.WARNING, logger="app.coordinator")
        for attempt in (1, 2, 3):
            world.faults.armed = {"commit"}  # the plan is frozen, then the commit fails; the process dies
            assert world.coordinator.step() == "failed"
            assert f"txid 1 attempt {attempt} failed" in caplog.text
            world.restart()
        assert world.coordinator.step() == "committed"
        assert world.metrics.value("trident_batch_replays_total", pipeline="world") == 3
        assert world.stored_counts() == world.truth() == {"a": 1}

    def test_second_coordinator_is_refused_while_the_lease_is_held(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE)
        other = Coordinator("world", world.coordinator.spout, world.coordinator.executor, world.store,
                            CoordinatorConfig(owner="someone-else"))
        with pytest.raises(LeaseHeldError):
            other.start()

    def test_zombie_coordinator_stops_at_its_next_fenced_write(self) -> None:
        """A takeover bumps the epoch: the old coordinator's freeze fails and it stops, writing nothing."""
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        zombie = world.coordinator
        world.coordinator = world.new_coordinator()  # same owner name: takes over at once, epoch + 1
        with pytest.raises(LeaseLostError):
            zombie.step()
        assert world.backing.data == {}
        step_until_idle(world)
        assert world.stored_counts() == {"a": 1}


class TestGuarantees:
    @pytest.mark.parametrize(("spout", "state", "expected"), [
        (SpoutKind.OPAQUE, StateKind.OPAQUE, Guarantee.EXACTLY_ONCE),
        (SpoutKind.TRANSACTIONAL, StateKind.TRANSACTIONAL, Guarantee.EXACTLY_ONCE),
        (SpoutKind.TRANSACTIONAL, StateKind.OPAQUE, Guarantee.EXACTLY_ONCE),
    ])
    def test_exactly_once_combinations(self, spout: SpoutKind, state: StateKind, expected: Guarantee) -> None:
        assert check_combination(spout, state) is expected

    def test_opaque_spout_with_transactional_state_is_refused_with_advice(self) -> None:
        with pytest.raises(CombinationError, match="use state kind 'opaque'"):
            World(SpoutKind.OPAQUE, StateKind.TRANSACTIONAL)

    def test_non_transactional_state_needs_explicit_acceptance(self) -> None:
        with pytest.raises(CombinationError, match="accept_at_least_once"):
            World(SpoutKind.OPAQUE, StateKind.NON_TRANSACTIONAL)
        assert check_combination(SpoutKind.OPAQUE, StateKind.NON_TRANSACTIONAL,
                                 accept_at_least_once=True) is Guarantee.AT_LEAST_ONCE


class TestDataLossAndMetrics:
    def test_data_loss_with_policy_fail_stops_the_coordinator(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=2, per_batch=2))
        for k in "abcd":
            world.append(0, k)
        world.coordinator.run(max_batches=1)
        world.source.truncate_before(Partition(TOPIC, 0), 3)
        with pytest.raises(DataLossError, match=r"events:0.*next offset to read is 2 but the log starts at 3"):
            world.coordinator.step()

    def test_data_loss_with_policy_skip_continues_from_log_start(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=2, per_batch=2))
        spout = world.coordinator.spout
        assert isinstance(spout, MemorySpout)
        spout.data_loss = DataLossPolicy.SKIP
        emitter = world.coordinator._emitter = spout.emitter()
        for k in "abcd":
            world.append(0, k)
        world.coordinator.run(max_batches=1)
        world.source.truncate_before(Partition(TOPIC, 0), 3)
        step_until_idle(world)
        assert world.stored_counts() == {"a": 1, "b": 1, "d": 1}
        assert emitter.lost_offsets == 1

    def test_metrics_follow_committed_batches(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2, caps=Caps(per_partition=5, per_batch=5))
        for i in range(12):
            world.append(i % 2, "xy"[i % 2])
        world.faults.armed = {"mark"}
        step_until_idle(world)
        m, t = world.metrics, "world"
        txid = world.coordinator.committed_txid
        assert m.value("trident_batches_total", pipeline=t, outcome="committed") == txid == 3
        assert m.value("trident_batches_total", pipeline=t, outcome="failed") == 1
        assert m.value("trident_batch_replays_total", pipeline=t) == 1
        assert m.value("trident_committed_txid", pipeline=t) == 3
        assert m.value("trident_records_total", pipeline=t) == 12
        assert m.value("trident_lease_held", pipeline=t) == 1
        assert m.value("trident_phase_seconds_count", pipeline=t, phase="commit") == 4  # 3 + the replay
        assert m.value("trident_phase_seconds_count", pipeline=t, phase="freeze") == 3


class TestCancellation:
    def test_abandoned_in_flight_work_is_cancelled(self) -> None:
        """When txid 1 fails, the still-running processing of txids 2 and 3 is cancelled through the executor."""
        started = {2: threading.Event(), 3: threading.Event()}
        release = threading.Event()

        def hold(batch: Batch) -> None:  # txids 2 and 3 keep processing until the test lets them go
            if batch.attempt > 1:
                return
            if batch.txid == 1:
                assert all(e.wait(30) for e in started.values())
            else:
                started[batch.txid].set()
                release.wait(30)

        world, rec = recorded_world(3, hold=hold, fail_commit_of={1})
        try:
            assert world.coordinator.step() == "failed"
        finally:
            release.set()
        assert sorted(rec.cancelled) == [2, 3]  # still running when txid 1 failed
        step_until_idle(world)
        assert world.stored_counts() == world.truth()

    def test_closing_the_coordinator_closes_its_executor(self) -> None:
        """Stopping releases what the executor holds for uncommitted txids (Spark's persisted results)."""
        world, rec = recorded_world(2)
        assert world.coordinator.step() == "committed"
        world.coordinator.close()
        assert rec.events[-1][0] == "close"


@pytest.mark.parametrize("retention", [2, 3, 5])
def test_retention_keeps_the_last_txids_and_a_restart_resumes_after_them(retention: int) -> None:
    """The store keeps the batch metadata of the last ``retention`` txids and nothing older; a coordinator started
    over that store resumes after the last one: every record counted once, against the source's own records."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1, caps=Caps(per_partition=1, per_batch=1),
                  retention=retention)
    for key in "abcdefg":
        world.append(0, key)
    assert [world.coordinator.step() for _ in range(7)] == ["committed"] * 7
    assert world.coordinator._progress._batches.txids == list(range(8 - retention, 8))
    world.restart()
    world.append(0, "h")
    assert world.coordinator.step() == "committed"
    assert world.coordinator.committed_txid == 8
    assert world.coordinator._progress._batches.txids == list(range(9 - retention, 9))
    assert world.stored_counts() == world.truth()
