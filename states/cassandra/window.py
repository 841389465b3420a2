"""AsyncWindow: many requests through one bounded window of ``execute_async`` calls.

Each answer's callback records it and sends the next request at once, on the driver's event
loop thread: no barrier between groups of requests and no hand-off to the calling thread per
request (which only waits for the last answer). A chain of answers that arrive synchronously
(e.g. every request failing before it leaves) is cut after ``MAX_DEPTH`` nested sends and
continued on the driver's executor, as the driver's own ``execute_concurrent`` does.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from cassandra.cluster import ResponseFuture, ResultSet, Session

MAX_DEPTH = 100
Outcome = tuple[bool, Any]  # (True, ResultSet) or (False, the exception)


class AsyncWindow:
    """Sends ``requests`` (statement, values or None) with at most ``size`` in flight; see :meth:`run`."""

    def __init__(self, session: Session, requests: Sequence[tuple[Any, Sequence[Any] | None]], size: int,
                 profile: object) -> None:
        self._session, self._requests, self._profile = session, requests, profile
        self._size = max(1, size)
        self._out: list[Outcome] = [(False, None)] * len(requests)
        self._next, self._left, self._depth = 0, len(requests), 0
        self._lock, self._done = threading.Lock(), threading.Event()

    def run(self) -> list[Outcome]:
        """Each request's outcome, in order, once every one has answered."""
        if not self._requests:
            return []
        for _ in range(min(self._size, len(self._requests))):
            self._send_next()
        self._done.wait()
        return self._out

    def _send_next(self) -> None:
        with self._lock:
            i = self._next
            if i >= len(self._requests):
                return
            self._next += 1
            deep = self._depth >= MAX_DEPTH
        if deep:
            self._session.submit(self._send, i)
        else:
            self._send(i)

    def _send(self, i: int) -> None:
        with self._lock:
            self._depth += 1
        try:
            statement, values = self._requests[i]
            try:
                future: ResponseFuture = self._session.execute_async(statement, values,
                                                                     execution_profile=self._profile)
            except Exception as e:  # noqa: BLE001 - a request that could not leave is an outcome like any other
                self._finish(i, (False, e))
                return
            future.add_callbacks(self._answered, self._failed, callback_args=(i, future), errback_args=(i,))
        finally:
            with self._lock:
                self._depth -= 1

    def _answered(self, rows: Any, i: int, future: ResponseFuture) -> None:
        future.clear_callbacks()
        try:
            outcome: Outcome = (True, ResultSet(future, rows))
        except Exception as e:  # noqa: BLE001 - a callback must not raise: the driver would only log it
            outcome = (False, e)
        self._finish(i, outcome)

    def _failed(self, error: BaseException, i: int) -> None:
        self._finish(i, (False, error))

    def _finish(self, i: int, outcome: Outcome) -> None:
        self._out[i] = outcome
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._done.set()
        else:
            self._send_next()
