"""The background watch's shape: a look every interval on its own thread, a failed look reported and
tried again, a turn skipped while inactive, and what it opened closed when stopped."""

from __future__ import annotations

import threading

from app.service.watch import Watch


class Counting(Watch):
    def __init__(self, *, fail_first: int = 0) -> None:
        super().__init__("counting-watch", 0.01)
        self.looks, self.closed, self.fail_first = 0, threading.Event(), fail_first
        self.errors: list[str] = []
        self.allowed = threading.Event()
        self.allowed.set()
        self.enough = threading.Event()

    def look(self) -> None:
        self.looks += 1
        if self.looks >= 5:
            self.enough.set()
        if self.looks <= self.fail_first:
            msg = f"look {self.looks}"
            raise OSError(msg)

    def failed(self, error: Exception) -> None:
        self.errors.append(str(error))

    def active(self) -> bool:
        return self.allowed.is_set()

    def close(self) -> None:
        self.closed.set()


def test_a_failed_look_is_reported_and_the_watch_goes_on_until_stopped() -> None:
    watch, stop = Counting(fail_first=2), threading.Event()
    watch.start(stop)
    assert watch.enough.wait(10)
    stop.set()
    assert watch.closed.wait(10)
    assert watch.errors == ["look 1", "look 2"]
    assert watch._thread is not None
    assert watch._thread.name == "counting-watch"
    assert watch._thread.daemon


def test_an_inactive_watch_looks_at_nothing() -> None:
    watch, stop = Counting(), threading.Event()
    watch.allowed.clear()
    watch.start(stop)
    assert not watch.enough.wait(0.2)
    assert watch.looks == 0
    stop.set()
    assert watch.closed.wait(10)
