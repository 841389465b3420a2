"""The kill tests' drain: a slow drain that keeps moving passes, a stalled one fails, on a fake clock."""

from __future__ import annotations

import pytest

from tests.service import test_kill


class FakeService:
    """A service whose restart, liveness and SIGTERM always succeed."""

    def start(self) -> None: ...
    def check_alive(self) -> None: ...
    def wait_ready(self) -> None: ...
    def terminate(self) -> int:
        return 0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """time.monotonic and time.sleep of the kill tests on a clock that moves only when slept."""
    now = [0.0]
    monkeypatch.setattr(test_kill.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(test_kill.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    return now


def test_a_drain_that_keeps_moving_passes_however_long_it_takes(clock: list[float]) -> None:
    counts = iter(range(1000))
    test_kill.drain_then_terminate(FakeService(), lambda: {"the": min(next(counts), 40)}, {"the": 40}, poll_s=30)
    assert clock[0] >= 40 * 30 - 60  # twenty minutes of fake time: past any fixed bound of a few minutes


def test_a_drain_that_stops_short_of_the_truth_fails_after_the_stall_bound(clock: list[float]) -> None:
    counts = iter(range(1000))
    with pytest.raises(AssertionError, match="no stored count changed for 180 s"):
        test_kill.drain_then_terminate(FakeService(), lambda: {"the": min(next(counts), 7)}, {"the": 40}, poll_s=30)
    assert 7 * 30 + 180 <= clock[0] <= 7 * 30 + 180 + 60
