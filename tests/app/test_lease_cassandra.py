"""The lease on Cassandra (the CQL test server): outages ridden out or stopped cleanly, and the
acquire unknown-outcome race between two coordinators of one host."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.topology.local import LocalExecutor, Sink
from spouts.memory import MemorySource, MemorySpout
from spouts.metadata import Partition
from spouts.protocols import SpoutKind
from states import Count, OpaqueMap
from states.cassandra import CassandraSettings, CassandraTransactionalStateStore
from states.cassandra.session import CassandraClient
from states.errors import LeaseHeldError, LeaseLostError
from states.memory import MemoryBackingMap
from tests.cqlserver import CqlServer, Fault
from tests.states.backends import cassandra_peer, cassandra_settings

TTL = 4.0  # renewed every 1.33 s; counted lost 3.2 s after the last renewal began
EVENTS = Partition("events", 0)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[CqlServer]:
    srv: CqlServer = cassandra_peer(request, "cqlserver").server
    srv.clear_faults()
    yield srv
    srv.clear_faults()


@pytest.fixture
def settings(request: pytest.FixtureRequest, server: CqlServer) -> CassandraSettings:
    # A store that gives up on one renewal quickly (8 attempts in ~0.4 s), as a real outage outlasts them.
    return cassandra_settings(request, "cqlserver", backoff_max_s=0.1, request_timeout_s=2.0)


class Pipeline:
    """A coordinator over a memory source and map, with its lease and progress in Cassandra."""

    def __init__(self, settings: CassandraSettings, *, client: CassandraClient | None = None,
                 owner: str | None = None, source: MemorySource | None = None) -> None:
        self.source = source or MemorySource([EVENTS])
        self.backing = MemoryBackingMap()
        self.store = CassandraTransactionalStateStore(settings, "wc", client=client)
        spout = MemorySpout(self.source, SpoutKind.OPAQUE, topology_id="wc")
        executor = LocalExecutor(spout.emitter(), [Sink(OpaqueMap(self.backing), Count(),
                                                        key=lambda r: (r.value.decode(),))])
        cfg: dict[str, Any] = {} if owner is None else {"owner": owner}
        config = CoordinatorConfig(lease_ttl_s=TTL, retry_backoff_s=(0.05, 0.2), idle_sleep_s=0.05, **cfg)
        self.coordinator = Coordinator("wc", spout, executor, self.store, config)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.coordinator.run(self.stop)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            self.error = e

    def counts(self) -> dict[str, int]:
        return {cast(tuple[str], k)[0]: v.curr for k, v in self.backing.data.items()}

    def wait_committed(self, txid: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.coordinator.committed_txid < txid:
            assert self.error is None, f"the pipeline stopped: {self.error}"
            assert time.monotonic() < deadline, f"txid {txid} not committed within {timeout} s"
            time.sleep(0.05)


def outage(server: CqlServer, seconds: float) -> None:
    """Every request answered Unavailable for ``seconds`` (the cluster lost its quorum)."""
    server.inject(Fault.unavailable(times=None))
    time.sleep(seconds)
    server.clear_faults()


class TestCassandraOutage:
    def test_an_outage_shorter_than_the_safe_window_is_ridden_out(self, server: CqlServer,
                                                                  settings: CassandraSettings) -> None:
        p = Pipeline(settings)
        p.source.append(EVENTS, None, b"a")
        p.coordinator.start()
        p.thread.start()
        p.wait_committed(1)
        time.sleep(0.2)  # just after a renewal or up to 1.33 s before the next: one falls in the outage
        outage(server, 1.7)  # longer than one renewal's attempts, shorter than 0.8 * TTL - TTL / 3
        p.source.append(EVENTS, None, b"b")
        p.wait_committed(2)
        time.sleep(TTL)  # and it keeps the lease well past its TTL
        assert p.error is None
        assert p.thread.is_alive()
        p.stop.set()
        p.thread.join(10)
        p.coordinator.close()
        assert p.counts() == {"a": 1, "b": 1}

    def test_a_longer_outage_stops_the_pipeline_before_the_lease_expires_and_releases_nothing(
            self, server: CqlServer, settings: CassandraSettings) -> None:
        p = Pipeline(settings)
        p.source.append(EVENTS, None, b"a")
        p.coordinator.start()
        p.thread.start()
        p.wait_committed(1)
        epoch = p.coordinator.epoch
        assert epoch is not None
        server.inject(Fault.unavailable(times=None))
        started = time.monotonic()
        p.thread.join(TTL + 5)
        took = time.monotonic() - started
        assert not p.thread.is_alive()
        assert isinstance(p.error, LeaseLostError), p.error
        assert "no renewal succeeded for" in str(p.error)
        assert f"of its {TTL:g} s TTL" in str(p.error)
        assert took < 0.8 * TTL + 0.5, f"stopped {took:.1f} s into the outage"
        p.coordinator.close()  # releases nothing: it can no longer know whether the lease is its own
        server.clear_faults()
        info = p.store.lease_info()
        assert info is not None
        assert info.owner == p.coordinator.config.owner
        assert info.epoch == epoch
        # The store's lease (not released, not renewed) expires at its TTL; then a successor takes over.
        successor = Pipeline(settings, source=p.source)
        deadline = time.monotonic() + TTL + 5
        while True:
            try:
                successor.coordinator.start()
                break
            except LeaseHeldError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert successor.coordinator.epoch == epoch + 1
        assert successor.coordinator.committed_txid == 1
        successor.coordinator.close()


class TestAcquireUnknownOutcome:
    def test_two_coordinators_of_one_host_racing_an_unknown_acquire_never_share_an_epoch(
            self, server: CqlServer, settings: CassandraSettings) -> None:
        """A's acquire times out unapplied; B takes the lease meanwhile; A's serial read must not take
        B's takeover for its own (with one owner name per host, both believed they held epoch 1)."""
        other = CassandraClient(settings)
        try:
            a, b = Pipeline(settings), Pipeline(settings, client=other)  # default owners: one hostname
            server.inject(Fault.delay(1.0, opcode="BATCH", times=1))
            timeout = server.inject(Fault.write_timeout_cas(applied=False, opcode="BATCH", times=1))
            outcome: list[BaseException | bool] = []

            def start_a() -> None:
                try:
                    outcome.append(a.coordinator.start())
                except BaseException as e:  # noqa: BLE001 - inspected below
                    outcome.append(e)

            thread = threading.Thread(target=start_a)
            thread.start()
            deadline = time.monotonic() + 10
            while timeout.seen == 0:  # A's acquire reached the server and waits there
                assert time.monotonic() < deadline
                time.sleep(0.01)
            b.coordinator.start()  # B takes epoch 1 while A's outcome is unknown
            thread.join(20)
            assert timeout.fired == 1
            assert isinstance(outcome[0], LeaseHeldError), f"A believes it holds the lease too: {outcome}"
            assert b.coordinator.epoch == 1
            assert a.coordinator.epoch is None
            info = b.store.lease_info()
            assert info is not None
            assert (info.owner, info.epoch) == (b.coordinator.config.owner, 1)
            a.coordinator.close()
            b.coordinator.close()
        finally:
            other.close()
