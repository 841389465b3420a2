"""RequestStream and AsyncWindow: order, the bound on requests in flight, and failures that never leave the client."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from states.cassandra.window import MAX_DEPTH, AsyncWindow, RequestStream


class Future:
    """A response future: its callback runs on :meth:`answer`, or at once if added after it (as the driver's)."""

    def __init__(self, value: Any) -> None:
        self.value, self.answered, self.lock = value, False, threading.Lock()
        self.callbacks: tuple[Any, tuple[Any, ...]] | None = None
        self._col_names, self._col_types, self.has_more_pages = ["v"], None, False  # what a ResultSet reads

    def add_callbacks(self, ok: Any, err: Any, callback_args: tuple = (), errback_args: tuple = ()) -> None:
        with self.lock:
            self.callbacks, now = (ok, callback_args), self.answered
        if now:
            ok([(self.value,)], *callback_args)

    def clear_callbacks(self) -> None:
        pass

    def answer(self) -> None:
        with self.lock:
            self.answered, callbacks = True, self.callbacks
        if callbacks is not None:
            ok, args = callbacks
            ok([(self.value,)], *args)


class Session:
    """Records requests in flight; answers them from another thread, or refuses them at once."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse, self.most, self.lock = refuse, 0, threading.Lock()
        self.in_flight: list[Any] = []
        self.pool = ThreadPoolExecutor(2)

    def execute_async(self, statement: Any, values: Any, execution_profile: Any = None) -> Future:
        if self.refuse:
            raise ConnectionError(f"refused {values}")
        f = Future(values[0])
        with self.lock:
            self.in_flight.append(f)
            self.most = max(self.most, len(self.in_flight))
        self.pool.submit(self._answer_later)
        return f

    def _answer_later(self) -> None:
        with self.lock:
            f = self.in_flight.pop(0)
        f.answer()

    def submit(self, fn: Any, *args: Any) -> Any:
        return self.pool.submit(fn, *args)


def test_outcomes_in_order_with_at_most_size_in_flight() -> None:
    session = Session()
    out = AsyncWindow(session, [("s", (i,)) for i in range(500)], 8, None).run()
    assert [(ok, rs.one()[0]) for ok, rs in out] == [(True, i) for i in range(500)]
    assert 1 <= session.most <= 8


def test_requests_refused_before_leaving_are_outcomes_without_deep_recursion() -> None:
    n = 20 * MAX_DEPTH
    out = AsyncWindow(Session(refuse=True), [("s", (i,)) for i in range(n)], 4, None).run()
    assert len(out) == n
    assert all(not ok and isinstance(e, ConnectionError) for ok, e in out)
    assert [str(e) for _, e in out] == [f"refused ({i},)" for i in range(n)]


def test_an_answer_that_cannot_be_decoded_is_an_outcome_not_a_hang() -> None:
    class Broken(Session):
        def execute_async(self, statement: Any, values: Any, execution_profile: Any = None) -> Future:
            f = super().execute_async(statement, values, execution_profile)
            if values[0] == 3:
                del f._col_names
            return f

    out = AsyncWindow(Broken(), [("s", (i,)) for i in range(6)], 2, None).run()
    assert [ok for ok, _ in out] == [True, True, True, False, True, True]
    assert isinstance(out[3][1], AttributeError)


def test_no_requests() -> None:
    assert AsyncWindow(Session(), [], 8, None).run() == []


def test_requests_sent_from_answers_join_the_same_bounded_window() -> None:
    """A follow-up sent for each answer (an LWT after its read) leaves within the same bound, none lost."""
    session = Session()
    stream = RequestStream(session, 4, None)
    for i in range(50):
        stream.send(i, "s", (i,))
    answered: dict[object, object] = {}
    while stream.outstanding:
        for tag, (ok, rs) in stream.take(at_least=3, timeout=5):
            assert ok
            answered[tag] = rs.one()[0]
            if isinstance(tag, int):
                stream.send(("then", tag), "s", (tag + 1000,))
    expected: dict[object, object] = {i: i for i in range(50)}
    expected.update({("then", i): i + 1000 for i in range(50)})
    assert answered == expected
    assert 1 <= session.most <= 4


def test_queued_requests_can_be_dropped() -> None:
    """After an error the caller drops what has not left; what is in flight still answers."""
    class Held(Session):
        def execute_async(self, statement: Any, values: Any, execution_profile: Any = None) -> Future:
            f = Future(values[0])
            with self.lock:
                self.in_flight.append(f)
            return f

    session = Held()
    stream = RequestStream(session, 2, None)
    for i in range(10):
        stream.send(i, "s", (i,))
    stream.drop_queued()
    for f in list(session.in_flight):
        f.answer()
    assert sorted(cast(int, tag) for tag, _ in stream.take(at_least=2, timeout=5)) == [0, 1]
    assert (stream.queued, stream.outstanding, len(session.in_flight)) == (0, 0, 2)


def test_taking_with_nothing_outstanding_waits_the_timeout_not_a_busy_loop() -> None:
    """A caller waiting out a retry's backoff with nothing in flight sleeps; without a timeout it returns at once."""
    import time

    stream = RequestStream(Session(), 2, None)
    start = time.monotonic()
    assert stream.take(timeout=0.2) == []
    assert time.monotonic() - start >= 0.19
    start = time.monotonic()
    assert stream.take() == []
    assert time.monotonic() - start < 0.1
