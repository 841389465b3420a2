"""The lease while a coordinator runs: the heartbeat, stopping before expiry, standby, unique owners."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import pytest
from cassandra import AuthenticationFailed

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.coordinator.lease import take_lease, unique_owner
from app.failures.policy import Decision, FailurePolicy
from app.topology.batch import Batch
from app.topology.local import LocalExecutor, Sink
from spouts.memory import MemorySpout
from spouts.protocols import SpoutKind
from states import Count, OpaqueMap
from states.errors import LeaseHeldError, LeaseLostError
from states.memory import MemoryTransactionalStateStore
from states.protocols import LeaseInfo
from states.spec import StateKind
from tests.app.harness import World

TTL = 1.0


class SlowExecutor(LocalExecutor):
    """Processing takes ``seconds`` (or until the txid is cancelled, which then fails it)."""

    def __init__(self, *args: Any, seconds: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seconds, self.cancelled = seconds, threading.Event()

    def process(self, batch: Batch) -> Any:
        if self.cancelled.wait(self.seconds):
            raise RuntimeError(f"txid {batch.txid} cancelled")
        return super().process(batch)

    def cancel(self, txid: int) -> None:
        self.cancelled.set()


class FlakyRenewals(MemoryTransactionalStateStore):
    """Renewals fail with a connection error while ``down`` is set (the store is away)."""

    def __init__(self) -> None:
        super().__init__("world")
        self.down = threading.Event()
        self.renewals = 0

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        if self.down.is_set():
            raise ConnectionError("store unreachable")
        self.renewals += 1
        super().renew_lease(owner, epoch, ttl_s)


class UnreachableAtFirst(MemoryTransactionalStateStore):
    """A store whose first ``failures`` lease requests fail with ``error`` (a store that is away)."""

    def __init__(self, topology_id: str, *, failures: int, error: Exception | None = None) -> None:
        super().__init__(topology_id)
        self.failures, self.error, self.calls = failures, error, 0

    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error or ConnectionError("cassandra: no host available")
        return super().acquire_lease(owner, ttl_s)


def slow_coordinator(world: World, seconds: float, *, owner: str = "me", ttl: float = TTL) -> Coordinator:
    spout = MemorySpout(world.source, SpoutKind.OPAQUE, topology_id="world")
    executor = SlowExecutor(spout.emitter(), [Sink(OpaqueMap(world.backing, metrics=world.metrics.states), Count(),
                                                   key=lambda r: (r.value.decode(),))], seconds=seconds)
    config = CoordinatorConfig(owner=owner, lease_ttl_s=ttl, retry_backoff_s=(0.0, 0.0), idle_sleep_s=0.0)
    return Coordinator("world", spout, executor, world.store, config, metrics=world.metrics)


def lease_held(world: World) -> float:
    return world.metrics.value("trident_lease_held", pipeline="world")


class TestHeartbeat:
    def test_a_batch_three_times_the_ttl_commits_without_losing_the_lease(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.coordinator.close()
        coord = slow_coordinator(world, seconds=3 * TTL)
        coord.start()
        for key in ("a", "b"):  # the second txid starts after the first one's long batch
            world.append(0, key)
            assert coord.step() == "committed"
            assert lease_held(world) == 1
        info = world.store.lease_info()
        assert info is not None
        assert (info.owner, info.epoch) == ("me", coord.epoch)
        assert world.stored_counts() == world.truth() == {"a": 1, "b": 1}
        coord.close()

    def test_renewal_failures_shorter_than_the_safe_window_are_ridden_out(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.coordinator.close()
        world.store = store = FlakyRenewals()
        coord = slow_coordinator(world, seconds=2 * TTL)
        coord.start()
        world.append(0, "a")
        store.down.set()
        threading.Timer(TTL * 0.4, store.down.clear).start()  # away for 0.4 TTL (the window is 0.8 TTL)
        assert coord.step() == "committed"
        assert store.renewals >= 1
        assert lease_held(world) == 1
        assert world.stored_counts() == {"a": 1}
        coord.close()

    def test_a_keeper_that_cannot_renew_stops_the_pipeline_before_the_lease_expires(
            self, caplog: pytest.LogCaptureFixture) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.coordinator.close()
        world.store = store = FlakyRenewals()
        coord = slow_coordinator(world, seconds=10 * TTL)
        coord.start()
        started = time.monotonic()
        world.append(0, "a")
        store.down.set()
        with pytest.raises(LeaseLostError, match=r"no renewal succeeded for 0\.\d+ s of its 1 s TTL") as lost:
            coord.step()
        took = time.monotonic() - started
        assert store.lease_info() is not None, "stopped while the lease was still ours (before it could expire)"
        assert took < TTL, f"stopped after {took:.2f} s"
        assert coord.executor.cancelled.is_set(), "the running batch was cancelled"  # type: ignore[attr-defined]
        assert "no longer current (now" not in str(lost.value)
        assert lease_held(world) == 0
        assert world.backing.data == {}
        assert "lease renewal failed (ConnectionError: store unreachable); retrying" in caplog.text
        coord.close()
        assert store.lease_info() is not None, "a lease it could not renew is not released blindly"

    def test_a_renewal_stuck_in_the_store_cannot_hold_the_heartbeat_past_the_deadline(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.coordinator.close()
        world.store = store = FlakyRenewals()
        hung = threading.Event()
        store.renew_lease = lambda *args: hung.wait(30) and None  # type: ignore[method-assign, assignment]  # a renewal that hangs
        coord = slow_coordinator(world, seconds=10 * TTL)
        coord.start()
        started = time.monotonic()
        world.append(0, "a")
        with pytest.raises(LeaseLostError, match=r"\(the last attempt has not answered\)"):
            coord.step()
        assert time.monotonic() - started < TTL
        assert store.lease_info() is not None
        hung.set()
        coord.close()

    def test_a_takeover_during_a_batch_stops_it_at_the_next_renewal(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.coordinator.close()
        coord = slow_coordinator(world, seconds=10 * TTL)
        coord.start()
        world.append(0, "a")
        threading.Timer(0.1, lambda: world.store.acquire_lease("me", TTL)).start()  # same owner: takes over
        with pytest.raises(LeaseLostError, match=r"a newer coordinator took over \(epoch 3\)"):
            coord.step()
        assert world.backing.data == {}
        coord.close()


class TestLeaseLostMessage:
    def test_the_message_says_why_and_never_contradicts_itself(self) -> None:
        assert "expired before it was renewed" in str(LeaseLostError("t", 1, 1))
        assert "no longer current (now 1)" not in str(LeaseLostError("t", 1, 1))
        assert "a newer coordinator took over (epoch 3)" in str(LeaseLostError("t", 2, 3))
        assert "not answered" in str(LeaseLostError("t", 2, reason="the renewal has not answered"))

    def test_an_expired_lease_renewed_too_late_says_it_expired(self) -> None:
        now = [0.0]
        store = MemoryTransactionalStateStore("t", clock=lambda: now[0])
        epoch = store.acquire_lease("me", 1.0)
        now[0] = 2.0
        with pytest.raises(LeaseLostError, match="expired before it was renewed"):
            store.renew_lease("me", epoch, 1.0)


class TestStandby:
    def test_a_standby_waits_logs_the_holder_and_takes_over_when_released(
            self, caplog: pytest.LogCaptureFixture) -> None:
        store = MemoryTransactionalStateStore("t")
        epoch = store.acquire_lease("active-1", 30.0)
        stop, standing_by = threading.Event(), threading.Event()
        got: list[tuple[int, float] | None] = []
        seen: list[LeaseInfo | None] = []
        caplog.set_level(logging.INFO, logger="app.coordinator.lease")

        def told(info: LeaseInfo | None) -> None:
            seen.append(info)
            standing_by.set()

        waiter = threading.Thread(target=lambda: got.append(take_lease(store, "standby-2", 30.0, stop,
                                                                        on_standby=told)))
        waiter.start()
        assert standing_by.wait(10)
        assert not got
        assert seen
        assert seen[0] is not None
        assert seen[0].owner == "active-1"
        assert "held by active-1 (epoch 1) until" in caplog.text
        released = time.monotonic()
        store.release_lease("active-1", epoch)
        waiter.join(10)
        assert got
        assert got[0] is not None
        assert got[0][0] == 2
        assert time.monotonic() - released < 6.0  # polled at most every 5 s
        assert caplog.text.count("held by active-1") == 1  # logged once per holder, not per poll

    def test_the_holder_is_logged_before_the_standby_role_is_announced(
            self, caplog: pytest.LogCaptureFixture) -> None:
        """Whoever reacts to the standby role (readiness, status) can already read who holds the lease."""
        store = MemoryTransactionalStateStore("t")
        store.acquire_lease("active-1", 30.0)
        stop, logged_when_told = threading.Event(), []
        caplog.set_level(logging.INFO, logger="app.coordinator.lease")

        def told(info: LeaseInfo | None) -> None:
            logged_when_told.append("held by active-1 (epoch 1) until" in caplog.text)
            stop.set()

        assert take_lease(store, "standby-2", 30.0, stop, on_standby=told) is None
        assert logged_when_told == [True]

    def test_a_standby_takes_over_when_the_lease_expires(self) -> None:
        store = MemoryTransactionalStateStore("t")
        store.acquire_lease("crashed", 0.5)
        started = time.monotonic()
        taken = take_lease(store, "standby", 0.5, threading.Event())
        assert taken is not None
        assert taken[0] == 2
        assert 0.3 < time.monotonic() - started < 1.5

    def test_stopping_a_standby_returns_none_and_a_single_attempt_still_raises(self) -> None:
        store = MemoryTransactionalStateStore("t")
        store.acquire_lease("active", 30.0)
        stop = threading.Event()
        threading.Timer(0.2, stop.set).start()
        assert take_lease(store, "standby", 30.0, stop) is None
        with pytest.raises(LeaseHeldError):
            take_lease(store, "standby", 30.0)

    def test_a_store_away_at_start_up_is_waited_for_not_a_crash(self, caplog: pytest.LogCaptureFixture) -> None:
        """Cassandra away while the lease is first asked for: retried with the attempt number, then taken."""
        store = UnreachableAtFirst("t", failures=2)
        told: list[object] = []
        with caplog.at_level(logging.WARNING, logger="app.coordinator.lease"):
            taken = take_lease(store, "me", 30.0, threading.Event(), on_standby=told.append,
                               policy=FailurePolicy(retry_backoff_s=(0.0, 0.0)))
        assert taken is not None
        assert taken[0] == 1
        assert store.lease_info() is not None
        assert told == [None, None]  # not ready meanwhile
        assert "cannot take the lease (attempt 2)" in caplog.text

    def test_refused_credentials_at_start_up_stop_with_the_policy_decision(self) -> None:
        """A permanent failure while taking the lease is not waited for: the decision is reported, then raised."""
        store = UnreachableAtFirst("t", failures=5, error=AuthenticationFailed("bad credentials for user trident"))
        decisions: list[Decision] = []
        with pytest.raises(AuthenticationFailed):
            take_lease(store, "me", 30.0, threading.Event(), on_permanent=decisions.append,
                       policy=FailurePolicy(retry_backoff_s=(0.0, 0.0)))
        assert len(decisions) == 1
        assert decisions[0].permanent
        assert store.calls == 1

    def test_a_coordinator_in_standby_holds_no_epoch(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        other = slow_coordinator(world, seconds=0.0, owner="other")
        stop = threading.Event()
        threading.Timer(0.2, stop.set).start()
        assert other.start(stop) is False
        assert other.epoch is None
        assert other.committed_txid == 0
        other.close()
        assert world.store.lease_info() is not None  # the active one's lease is untouched


class TestOwnerIdentity:
    def test_owners_are_unique_per_process_with_the_hostname_as_prefix(self) -> None:
        a, b = unique_owner(), unique_owner()
        assert a != b
        assert a.startswith(f"{socket.gethostname()}-")
        assert b.startswith(f"{socket.gethostname()}-")
        assert unique_owner("pod-0").startswith("pod-0-")
        assert CoordinatorConfig().owner != CoordinatorConfig().owner
        assert CoordinatorConfig(owner="given").owner == "given"  # still settable

    def test_config_default_owner_is_unique(self) -> None:
        """Two configs without an owner get different owners, each with the hostname as its prefix."""
        from app.config.schema.service import ServiceModel

        a, b = ServiceModel().owner_or_unique(), ServiceModel().owner_or_unique()
        assert a != b
        assert a.startswith(socket.gethostname() + "-")


class FakeCompiled:
    """What PipelineRunner reads of a compiled pipeline: an id, a source, a store, the coordinator config."""

    def __init__(self, world: World, owner: str) -> None:
        self.id, self._world = "world", world
        self.coordinator = CoordinatorConfig(owner=owner, lease_ttl_s=TTL, retry_backoff_s=(0.0, 0.0),
                                             idle_sleep_s=0.01)
        self.topology = self

    def source(self) -> MemorySpout:
        return MemorySpout(self._world.source, SpoutKind.OPAQUE, topology_id="world")

    def store(self) -> MemoryTransactionalStateStore:
        return self._world.store


class TestRunnerStandby:
    def runner(self, world: World) -> Any:
        from app.service.runner import PipelineRunner

        spout = MemorySpout(world.source, SpoutKind.OPAQUE, topology_id="world")
        executor = LocalExecutor(spout.emitter(), [Sink(OpaqueMap(world.backing, metrics=world.metrics.states), Count(),
                                                        key=lambda r: (r.value.decode(),))])
        return PipelineRunner(FakeCompiled(world, "second"), executor, metrics=world.metrics)  # type: ignore[arg-type]

    def wait(self, check: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline
            time.sleep(0.02)

    def test_a_second_runner_waits_not_ready_then_takes_over_when_the_lease_is_released(self) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)  # its coordinator holds the lease
        world.append(0, "a")
        assert world.coordinator.step() == "committed"
        runner, stop, fatal = self.runner(world), threading.Event(), threading.Event()
        assert runner.role == "starting"
        runner.start(stop, fatal.set)
        self.wait(lambda: runner.role == "standby")
        status = runner.status(60.0)
        assert (status["ready"], status["role"], status["lease_held"], status["error"]) == (False, "standby",
                                                                                           False, None)
        world.append(0, "b")
        world.coordinator.close()  # releases: the standby takes over at its next poll
        self.wait(lambda: runner.role == "active" and runner.coordinator.committed_txid == 2)
        assert runner.status(60.0)["ready"]
        assert not fatal.is_set()
        stop.set()
        runner.thread.join(10)
        assert runner.role == "stopped"
        assert world.stored_counts() == world.truth() == {"a": 1, "b": 1}

    def test_a_runner_stopped_in_standby_says_so_and_leaves_the_lease_alone(
            self, caplog: pytest.LogCaptureFixture) -> None:
        world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
        world.append(0, "a")
        assert world.coordinator.step() == "committed"
        caplog.set_level(logging.INFO)
        runner, stop, fatal = self.runner(world), threading.Event(), threading.Event()
        runner.start(stop, fatal.set)
        self.wait(lambda: runner.role == "standby")
        stop.set()
        runner.thread.join(10)
        assert runner.role == "stopped"
        assert not fatal.is_set()
        assert runner.error is None
        assert "pipeline world stopped in standby (it never held the lease)" in caplog.text
        assert "closed at committed txid" not in caplog.text
        info = world.store.lease_info()
        assert info is not None
        assert info.owner == "world-owner"
