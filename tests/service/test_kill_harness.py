"""The kill tests' own bookkeeping: the drain (a slow drain that keeps moving passes, a stalled one fails, on a
fake clock) and the stop in the freeze window (a store the stopped writer's lock hides is looked at again)."""

from __future__ import annotations

import sqlite3
from typing import Any

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


class PausingService(FakeService):
    """Records SIGSTOPs and SIGCONTs, as the kill tests send them."""

    def __init__(self) -> None:
        self.signals: list[str] = []

    def pause(self) -> None:
        self.signals.append("stop")

    def resume(self) -> None:
        self.signals.append("cont")


def test_a_store_locked_by_the_stopped_writer_is_looked_at_again_not_an_error() -> None:
    """Frozen txid 3 is seen, the service stopped, and the read then fails on the stopped writer's WAL lock: the
    service is resumed and looked at again, and stopped for good when a read while stopped sees txid 3 frozen."""
    frozen = {"coordinator": '{"committed_txid": 2}', "batches/3": "{}"}
    reads: list[Any] = [frozen, sqlite3.OperationalError("locking protocol"), frozen, frozen]

    def documents() -> dict[str, str]:
        answer = reads.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    service = PausingService()
    test_kill.stop_in_freeze_window(service, documents)  # type: ignore[arg-type]
    assert service.signals == ["stop", "cont", "stop"]
    assert reads == []
