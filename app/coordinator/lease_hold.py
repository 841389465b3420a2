"""The coordinator's hold on its lease: taken (or waited for as a standby), renewed, checked, given up."""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.coordinator.lease import LeaseKeeper, release_lease, take_lease
from app.failures.errors import CoordinatorNotStartedError
from app.failures.policy import Decision, FailurePolicy
from app.metrics import Metrics
from states.errors import LeaseLostError
from states.protocols import CoordinatorStore, LeaseInfo


class LeaseHold:
    """One topology's lease for one owner: its epoch once taken, the heartbeat that renews it, its gauges."""

    def __init__(self, store: CoordinatorStore, owner: str, ttl_s: float, *, policy: FailurePolicy,
                 metrics: Metrics, clock: Callable[[], float]) -> None:
        self.store, self.owner, self.ttl_s = store, owner, ttl_s
        self._policy, self._metrics, self._clock = policy, metrics, clock
        self.epoch: int | None = None
        self.keeper: LeaseKeeper | None = None

    @property
    def lost(self) -> LeaseLostError | None:
        """Why the heartbeat counts the lease as lost, if it does."""
        return None if self.keeper is None else self.keeper.lost

    def take(self, stop: threading.Event | None, *, on_standby: Callable[[LeaseInfo | None], None],
             on_permanent: Callable[[Decision], None], on_lost: Callable[[LeaseLostError], None]) -> LeaseKeeper | None:
        """Take the lease (:func:`app.coordinator.lease.take_lease`) and start its heartbeat; None when ``stop`` was set."""
        gauge = self._metrics.lease_held.labels(self.store.topology_id)
        gauge.set(0)
        granted = take_lease(self.store, self.owner, self.ttl_s, stop, on_standby=on_standby, policy=self._policy,
                             on_permanent=on_permanent, clock=self._clock)
        if granted is None:
            return None
        self.epoch, asked_at = granted
        self.keeper = LeaseKeeper(self.store, self.owner, self.epoch, self.ttl_s, renewed_at=asked_at,
                                  on_lost=on_lost, clock=self._clock).start()
        gauge.set(1)
        self._metrics.lease_epoch.labels(self.store.topology_id).set(self.epoch)
        return self.keeper

    def check(self) -> None:
        """Raise LeaseLostError (saying why) if the heartbeat lost the lease or could not renew it in time."""
        if self.keeper is None:
            raise CoordinatorNotStartedError(self.store.topology_id)
        try:
            self.keeper.check()
        except LeaseLostError:
            self.lost_gauge()
            raise

    def lost_gauge(self) -> None:
        """The lease is not held (any more)."""
        self._metrics.lease_held.labels(self.store.topology_id).set(0)

    def stop_renewing(self) -> bool:
        """Stop the heartbeat; True when the lease was still ours then (worth releasing)."""
        if self.keeper is None:
            return False
        ours = self.keeper.lost is None
        self.keeper.stop()
        return ours

    def release(self) -> None:
        """Give the lease up at once so a successor can start (best effort: the TTL ends it anyway)."""
        if self.epoch is not None:
            release_lease(self.store, self.owner, self.epoch)
