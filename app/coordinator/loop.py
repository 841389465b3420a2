"""The one loop that drives a coordinator's steps: what each step's outcome means, and when it retries.

The coordinator (``Coordinator.run``), the service's pipeline threads and the demo all run it;
they differ only in their callbacks (log a commit, record progress for ``/readyz``, print).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.failures.policy import backoff


class Outcome(enum.StrEnum):
    """What one coordinator step did."""

    COMMITTED = "committed"  # the oldest in-flight txid was committed
    IDLE = "idle"  # nothing new to read
    FAILED = "failed"  # a txid failed; it (and every later in-flight txid) is replayed


def _nothing(*_: object) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Callbacks:
    """What a driver of the loop is told: a commit (with the step's seconds), an idle poll, a failure
    (with the failures in a row so far). They run on the loop's thread, between steps."""

    on_commit: Callable[[float], None] = _nothing
    on_idle: Callable[[], None] = _nothing
    on_failure: Callable[[int], None] = _nothing


NO_CALLBACKS = Callbacks()


def run_steps(step: Callable[[], Outcome], stop: threading.Event, *, idle_sleep_s: float,
              retry_backoff_s: tuple[float, float], callbacks: Callbacks = NO_CALLBACKS,
              max_batches: int | None = None, until_idle: bool = False,
              clock: Callable[[], float] = time.monotonic) -> int:
    """Call ``step`` until ``stop`` is set, ``max_batches`` commits, or (``until_idle``) an idle step.

    Waits ``idle_sleep_s`` after an idle step and :func:`~app.failures.policy.backoff` after a failure (``stop`` ends
    either wait at once). Exceptions from ``step`` (the fatal errors) propagate. Returns the commits.
    """
    committed = failures = 0
    while not stop.is_set() and (max_batches is None or committed < max_batches):
        started = clock()
        outcome = step()
        if outcome is Outcome.COMMITTED:
            committed, failures = committed + 1, 0
            callbacks.on_commit(clock() - started)
        elif outcome is Outcome.IDLE:
            failures = 0
            callbacks.on_idle()
            if until_idle:
                break
            stop.wait(idle_sleep_s)
        else:
            failures += 1
            callbacks.on_failure(failures)
            stop.wait(backoff(failures, *retry_backoff_s))
    return committed
