"""Bounded windows of ``execute_async`` calls: :class:`RequestStream` and :class:`AsyncWindow` over it.

A request its coordinator left unanswered until the client's timeout puts that host last in the profile's
query plans for a while (:mod:`states.cassandra.routing`: a hung node). Each answer's callback records it and
sends the next queued request at once, on the driver's
event loop thread: the window stays full without a barrier between groups of requests and
without a hand-off to the calling thread per request. The calling thread queues requests when it
likes (:meth:`RequestStream.send`) and takes answers in completion order
(:meth:`RequestStream.take`), so a request that depends on an answer (an LWT after its read)
joins the same window. A chain of answers that arrive synchronously (e.g. every request failing
before it leaves) is cut after ``MAX_DEPTH`` nested sends and continued on the driver's
executor, as the driver's own ``execute_concurrent`` does.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

from cassandra import OperationTimedOut
from cassandra.cluster import ResponseFuture, ResultSet, Session

MAX_DEPTH = 100
Outcome = tuple[bool, Any]  # (True, ResultSet) or (False, the exception)


class RequestStream:
    """Requests tagged by the caller, at most ``size`` in flight, answers taken as they arrive."""

    def __init__(self, session: Session, size: int, profile: object) -> None:
        self._session, self._profile, self.size = session, profile, max(1, size)
        self._queued: deque[tuple[Hashable, Any, Sequence[Any] | None]] = deque()
        self._answers: deque[tuple[Hashable, Outcome]] = deque()
        self._flying, self._want = 0, 1
        self._nested = threading.local()  # sends nested in this thread's callbacks (a chain of synchronous answers)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)

    @property
    def queued(self) -> int:
        """Requests waiting for a free slot."""
        return len(self._queued)

    @property
    def outstanding(self) -> int:
        """Requests sent or queued whose answers were not taken yet."""
        with self._lock:
            return len(self._queued) + self._flying + len(self._answers)

    def send(self, tag: Hashable, statement: Any, values: Sequence[Any] | None) -> None:
        """Queue one request; it leaves at once while fewer than ``size`` are in flight."""
        with self._lock:
            self._queued.append((tag, statement, values))
            go = self._flying < self.size
            if go:
                self._flying += 1
                request = self._queued.popleft()
        if go:
            self._send(request)

    def take(self, at_least: int = 1, timeout: float | None = None) -> list[tuple[Hashable, Outcome]]:
        """Answers so far, in completion order, after waiting until ``at_least`` (capped at what is
        outstanding) have arrived or ``timeout`` seconds passed (the whole timeout when nothing is)."""
        with self._ready:
            want = min(at_least, len(self._queued) + self._flying + len(self._answers))
            self._want = max(1, want)
            if not want:
                if timeout:
                    self._ready.wait(timeout)  # nothing to wait for but the time: a backoff
            elif len(self._answers) < want:
                self._ready.wait_for(lambda: len(self._answers) >= want, timeout)
            out = list(self._answers)
            self._answers.clear()
            return out

    def drop_queued(self) -> None:
        """Forget the requests that have not left (after an error: the caller stops)."""
        with self._lock:
            self._queued.clear()

    def _send(self, request: tuple[Hashable, Any, Sequence[Any] | None]) -> None:
        tag, statement, values = request
        nested = self._nested
        depth = getattr(nested, "depth", 0)
        nested.depth = depth + 1
        try:
            try:
                future: ResponseFuture = self._session.execute_async(statement, values,
                                                                     execution_profile=self._profile)
            except Exception as e:  # noqa: BLE001 - a request that could not leave is an outcome like any other
                self._finish(tag, (False, e))
                return
            future.add_callbacks(self._answered, self._failed, callback_args=(tag, future), errback_args=(tag,))
        finally:
            nested.depth = depth

    def _answered(self, rows: Any, tag: Hashable, future: ResponseFuture) -> None:
        future.clear_callbacks()
        try:
            outcome: Outcome = (True, ResultSet(future, rows))
        except Exception as e:  # noqa: BLE001 - a callback must not raise: the driver would only log it
            outcome = (False, e)
        self._finish(tag, outcome)

    def _failed(self, error: BaseException, tag: Hashable) -> None:
        if isinstance(error, OperationTimedOut) and error.last_host is not None:
            self._unanswered(error.last_host)
        self._finish(tag, (False, error))

    def _unanswered(self, host: Any) -> None:
        """A coordinator that did not answer within the client's timeout: its routing puts it last for a while
        (:mod:`states.cassandra.routing`), when the profile's policy does that."""
        profiles = getattr(self._session.cluster.profile_manager, "profiles", {})
        policy = getattr(profiles.get(self._profile), "load_balancing_policy", None)
        unanswering = getattr(policy, "unanswering", None)
        if unanswering is not None:
            unanswering.mark(host)

    def _finish(self, tag: Hashable, outcome: Outcome) -> None:
        with self._lock:
            self._answers.append((tag, outcome))
            if len(self._answers) >= self._want:
                self._ready.notify()
            request = self._queued.popleft() if self._queued else None
            if request is None:
                self._flying -= 1
        if request is None:
            return
        if getattr(self._nested, "depth", 0) >= MAX_DEPTH:
            self._session.submit(self._send, request)
        else:
            self._send(request)


class AsyncWindow:
    """Sends ``requests`` (statement, values or None) with at most ``size`` in flight; see :meth:`run`."""

    def __init__(self, session: Session, requests: Sequence[tuple[Any, Sequence[Any] | None]], size: int,
                 profile: object) -> None:
        self._stream, self._requests = RequestStream(session, size, profile), requests

    def run(self) -> list[Outcome]:
        """Each request's outcome, in order, once every one has answered."""
        out: list[Outcome] = [(False, None)] * len(self._requests)
        for i, (statement, values) in enumerate(self._requests):
            self._stream.send(i, statement, values)
        left = len(self._requests)
        while left:
            for tag, outcome in self._stream.take(at_least=left):
                out[tag] = outcome  # type: ignore[call-overload]  # the tags are the request indexes
                left -= 1
        return out
