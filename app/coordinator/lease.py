"""The coordinator lease while a process runs: a unique owner name, waiting as a standby, the heartbeat.

* :func:`unique_owner`: the hostname as a readable prefix plus the pid and a random suffix, so an
  acquire whose outcome was unknown, resolved by reading back "owner and epoch are what I wrote",
  can never mistake another process's takeover for its own.
* :func:`take_lease`: acquire, or wait as a standby (polling until the holder's expiry, capped) until
  the lease is released or expires. A store that cannot be reached meanwhile (Cassandra away) is
  waited for as the failure policy says, never a reason to crash-loop.
* :class:`LeaseKeeper`: renews the lease every ``ttl / 3`` in its own thread, whatever a batch is
  doing. Renewal failures are retried; when no renewal has succeeded for ``SAFE_FRACTION`` of the
  TTL (measured on the monotonic clock from the start of the last successful renewal, which is no
  later than the store's own renewal), the lease is declared lost *before* it could expire: the
  keeper calls ``on_lost`` (the coordinator cancels its running work) and :meth:`LeaseKeeper.check`
  raises :class:`~states.errors.LeaseLostError` saying why from then on.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from app.failures.error_text import describe
from app.failures.policy import Decision, Failure, FailurePolicy
from states.errors import LeaseHeldError, LeaseLostError, LeaseNotRenewedError
from states.protocols import CoordinatorStore, LeaseInfo

log = logging.getLogger(__name__)

SAFE_FRACTION = 0.8  # of the TTL without a successful renewal, after which the lease counts as lost
RENEW_FRACTION = 1 / 3  # of the TTL between renewals
STANDBY_POLL_MAX_S = 5.0  # a standby polls at least this often (a released lease is taken at once)


def unique_owner(prefix: str | None = None) -> str:
    """``<hostname>-<pid>-<6 random hex>``: readable, and unique per process."""
    return f"{prefix or socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def take_lease(store: CoordinatorStore, owner: str, ttl_s: float, stop: threading.Event | None = None, *,
               on_standby: Callable[[LeaseInfo | None], None] = lambda _: None,
               policy: FailurePolicy | None = None,
               on_permanent: Callable[[Decision], None] = lambda _: None,
               clock: Callable[[], float] = time.monotonic,
               wall_clock: Callable[[], float] = time.time) -> tuple[int, float] | None:
    """Acquire the lease: its epoch and the ``clock`` time the successful attempt started (the store's
    expiry is at least that plus the TTL). With ``stop`` None, one attempt (LeaseHeldError if held).

    With ``stop``, wait as a standby while another owner holds it: ``on_standby`` is told the holder
    (logged once per holder and epoch), and the lease is asked for again at the holder's expiry
    (at most :data:`STANDBY_POLL_MAX_S` or a third of the TTL later). Returns None once ``stop`` is set.
    A failure to reach the store is retried while ``policy`` calls it transient (logged with its
    attempt number), and raised once it calls it permanent (refused credentials, an outage past its
    limit), after ``on_permanent`` is told the decision.
    """
    seen: tuple[str, int] | None = None
    policy = policy or FailurePolicy()
    failures, failing_since = 0, 0.0
    while True:
        asked_at = clock()
        try:
            return store.acquire_lease(owner, ttl_s), asked_at
        except LeaseHeldError as e:
            if stop is None:
                raise
            held: Exception = e
            try:
                info = store.lease_info()
            except Exception as e2:  # noqa: BLE001 - judged below like a failed acquire
                held, info = e2, None
        except Exception as e:
            if stop is None:
                raise
            held, info = e, None
        if not isinstance(held, LeaseHeldError):
            failures, failing_since = failures + 1, failing_since if failures else asked_at
            retry_in_s = _retry_in(policy, Failure(held, 0, failures, failures, clock() - failing_since),
                                   on_permanent, store.topology_id)
            on_standby(None)
            if stop.wait(retry_in_s):
                return None
            continue
        failures = 0
        seen = _log_standby(store.topology_id, held, info, seen)
        on_standby(info)  # after the log line, so whoever sees the role can already read who holds the lease
        if stop.wait(_standby_wait(info, ttl_s, wall_clock)):
            return None


def release_lease(store: CoordinatorStore, owner: str, epoch: int) -> None:
    """Give the lease up so a successor can start at once; best effort (conditional on owner and epoch, and a
    lease not released expires with its TTL), so a failure is logged, not raised."""
    try:
        store.release_lease(owner, epoch)
    except Exception as e:
        log.warning("pipeline %s: could not release the lease: %s", store.topology_id, describe(e))
        log.debug("pipeline %s: releasing the lease failed", store.topology_id, exc_info=True)


def _retry_in(policy: FailurePolicy, failure: Failure, on_permanent: Callable[[Decision], None],
              topology_id: str) -> float:
    """Seconds before asking the store again; raises the failure's error once ``policy`` calls it permanent."""
    decision = policy.decide(failure)
    if decision.permanent:
        on_permanent(decision)
        raise failure.error
    log.warning("topology %s: cannot take the lease (attempt %d): %s; trying again in %.2f s",
                topology_id, failure.failures_in_a_row, decision.reason, decision.retry_in_s)
    return decision.retry_in_s


def _log_standby(topology_id: str, held: Exception, info: LeaseInfo | None,
                 seen: tuple[str, int] | None) -> tuple[str, int] | None:
    """Log the standby once per holder and epoch; the holder (owner, epoch) seen now."""
    if info is not None and (info.owner, info.epoch) != seen:
        until = "an unknown time" if info.expires_at is None else time.strftime(
            "%H:%M:%S UTC", time.gmtime(info.expires_at))
        log.info("topology %s: standby; the lease is held by %s (epoch %d) until %s", topology_id,
                 info.owner, info.epoch, until)
        return (info.owner, info.epoch)
    if info is None and seen is None:
        log.info("topology %s: standby; %s", topology_id, held)
    return seen


def _standby_wait(info: LeaseInfo | None, ttl_s: float, wall_clock: Callable[[], float]) -> float:
    """Seconds until a standby asks again: the holder's expiry, at most STANDBY_POLL_MAX_S or a third of the TTL."""
    remaining = None if info is None or info.expires_at is None else info.expires_at - wall_clock()
    wait = min(STANDBY_POLL_MAX_S, ttl_s * RENEW_FRACTION)
    if remaining is not None:
        wait = min(wait, max(remaining, 0.0) + 0.05)
    return max(wait, 0.05)


class LeaseKeeper:
    """Renews one held lease on its own schedule and tells when it is lost (see the module docstring)."""

    def __init__(self, store: CoordinatorStore, owner: str, epoch: int, ttl_s: float, *,
                 renewed_at: float, on_lost: Callable[[LeaseLostError], None] = lambda _: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.owner, self.epoch, self.ttl_s = store, owner, epoch, ttl_s
        self._renewed_at, self._on_lost, self._clock = renewed_at, on_lost, clock
        self._lost: LeaseLostError | None = None
        self._last_error: str | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{store.topology_id}", daemon=True)

    @property
    def interval_s(self) -> float:
        return self.ttl_s * RENEW_FRACTION

    @property
    def deadline(self) -> float:
        """The monotonic time after which the lease counts as lost unless renewed first."""
        return self._renewed_at + self.ttl_s * SAFE_FRACTION

    @property
    def lost(self) -> LeaseLostError | None:
        return self._lost

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop renewing (the caller releases the lease, or lets it expire)."""
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def check(self) -> None:
        """Raise LeaseLostError if the lease is lost or could expire before the next renewal is due."""
        if self._lost is None and self._clock() >= self.deadline:
            self._declare_lost(self._not_renewed())
        if self._lost is not None:
            raise self._lost

    # -- the heartbeat thread ---------------------------------------------------------------

    def _run(self) -> None:
        retry_s = min(1.0, self.ttl_s / 10)
        failed = False
        while self._lost is None:
            now = self._clock()
            due = now + retry_s if failed else self._renewed_at + self.interval_s
            if self._stopped.wait(max(0.0, min(due, self.deadline) - now)):
                return
            if self._clock() >= self.deadline:
                self._declare_lost(self._not_renewed())
                return
            failed = not self._renew_once()

    def _renew_once(self) -> bool:
        """One renewal, waited for no longer than the deadline. False when it failed (and should be retried)."""
        started = self._clock()
        future = _in_thread(f"lease-renew-{self.store.topology_id}", self.store.renew_lease, self.owner,
                            self.epoch, self.ttl_s)
        try:
            future.result(timeout=max(0.0, self.deadline - started))
        except FutureTimeout:
            self._declare_lost(self._not_renewed("the last attempt has not answered"))
            return False
        except LeaseLostError as e:
            self._declare_lost(e)
            return False
        except Exception as e:  # noqa: BLE001 - the store is away: retry while the lease is surely ours
            self._last_error = f"last error: {type(e).__name__}: {e}"
            log.warning("topology %s: lease renewal failed (%s: %s); retrying, the lease is safe for %.1f s more",
                        self.store.topology_id, type(e).__name__, e, max(0.0, self.deadline - self._clock()))
            return False
        with self._lock:
            self._renewed_at = max(self._renewed_at, started)
        return True

    def _not_renewed(self, why: str | None = None) -> LeaseNotRenewedError:
        since = self._clock() - self._renewed_at
        why = why or self._last_error or "no attempt finished"
        return LeaseNotRenewedError(self.store.topology_id, self.epoch, reason=(
            f"no renewal succeeded for {since:.1f} s of its {self.ttl_s:g} s TTL ({why}); stopping before "
            f"it could expire (another instance may take over)"))

    def _declare_lost(self, error: LeaseLostError) -> None:
        with self._lock:
            if self._lost is not None or self._stopped.is_set():  # stopped: the coordinator is closing anyway
                return
            self._lost = error
        log.error("%s", error)
        try:
            self._on_lost(error)
        except Exception:
            log.warning("could not cancel the work of topology %s", self.store.topology_id, exc_info=True)


def _in_thread(name: str, fn: Callable[..., None], *args: object) -> Future[None]:
    """Run ``fn`` in a daemon thread of its own: a renewal stuck in the store never blocks the heartbeat."""
    future: Future[None] = Future()

    def call() -> None:
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting heartbeat
            future.set_exception(e)
        else:
            future.set_result(None)

    future.set_running_or_notify_cancel()
    threading.Thread(target=call, name=name, daemon=True).start()
    return future
