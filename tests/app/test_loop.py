"""The one step loop: outcomes, callbacks, the backoff, and how it stops."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from app.coordinator.loop import Callbacks, Outcome, run_steps
from app.failures.policy import backoff


def test_backoff_doubles_from_the_first_wait_and_is_capped() -> None:
    """1, 2, 4, 8 times the first wait, never above the largest."""
    assert [backoff(n, 0.5, 3.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff(10_000, 1e-9, 10.0) < 10.0  # the exponent is bounded: no overflow, no surprise cap


class Recorder:
    """Callbacks that record what they were told; the stop event is set after ``stop_after`` steps."""

    def __init__(self, outcomes: list[Outcome], stop_after: int | None = None) -> None:
        self.outcomes: Iterator[Outcome] = iter(outcomes)
        self.events: list[tuple[str, object]] = []
        self.stop = threading.Event()
        self.stop_after, self.steps = stop_after, 0

    def step(self) -> Outcome:
        self.steps += 1
        if self.steps == self.stop_after:
            self.stop.set()
        return next(self.outcomes)

    def callbacks(self) -> Callbacks:
        return Callbacks(on_commit=lambda s: self.events.append(("commit", s)),
                         on_idle=lambda: self.events.append(("idle", None)),
                         on_failure=lambda n: self.events.append(("failure", n)))


def test_callbacks_see_every_outcome_and_failures_in_a_row() -> None:
    """Failures are counted in a row and reset by a commit; until_idle stops at the first idle step."""
    failed, committed, idle = Outcome.FAILED, Outcome.COMMITTED, Outcome.IDLE
    r = Recorder([failed, failed, committed, failed, idle, committed])
    ticks = iter(range(100))
    n = run_steps(r.step, r.stop, idle_sleep_s=0, retry_backoff_s=(0, 0), callbacks=r.callbacks(),
                  until_idle=True, clock=lambda: float(next(ticks)))
    assert n == 1
    assert r.events == [("failure", 1), ("failure", 2), ("commit", 1.0), ("failure", 1), ("idle", None)]


def test_stops_at_max_batches_and_when_stopped() -> None:
    """max_batches ends the loop after that many commits; a set stop event ends it before the next step."""
    r = Recorder([Outcome.COMMITTED] * 5)
    assert run_steps(r.step, r.stop, idle_sleep_s=0, retry_backoff_s=(0, 0), max_batches=2) == 2
    r = Recorder([Outcome.IDLE] * 5, stop_after=3)
    assert run_steps(r.step, r.stop, idle_sleep_s=0, retry_backoff_s=(0, 0)) == 0
    assert r.steps == 3


def test_outcomes_compare_equal_to_their_names() -> None:
    """Outcome values are the strings step() returned before the enum: callers comparing names still work."""
    assert Outcome.COMMITTED == "committed"
    assert Outcome.IDLE == "idle"
    assert Outcome.FAILED == "failed"
