"""CassandraPipe: one ``cas_update``'s reads and LWTs through one :class:`RequestStream`.

The same decisions as the request loop (``CassandraClient.run`` and ``states.cassandra.retry``),
taken per request as its answer arrives instead of per group: a read that failed transiently is
sent again after a backoff (the key waits, the window does not); an LWT of unknown outcome is
resolved by a serial read of its row (``states.cassandra.unknown``), itself retried like a read;
anything else is raised. Every request sent is counted in ``trident_state_requests_total`` (added up
locally and added to the counter with each batch of answers, not one counter update per request).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Hashable, Sequence
from typing import Any

from states.cassandra.requests import CasRequests
from states.cassandra.retry import Decision, backoff_s, decide
from states.cassandra.session import BACKEND, TUPLES
from states.cassandra.unknown import serial, settle
from states.cassandra.window import RequestStream
from states.errors import UnknownOutcomeError
from states.layout import Row
from states.pipeline import READ, Answer, Stored
from states.protocols import CasResult

Tag = tuple[str, int]  # ("read" | "cas" | "serial_read", the caller's tag)


class CassandraPipe:
    """A :class:`~states.pipeline.CasPipe` over a Cassandra backing map (:class:`~states.cassandra.requests.CasRequests`):
    nothing cached, every key read."""

    def __init__(self, backing: CasRequests) -> None:
        self.backing, self.client = backing, backing.client
        self.stream = RequestStream(self.client.session, self.client.settings.max_concurrency, TUPLES)
        self.size = self.stream.size
        self._counters = {kind: backing.metrics.state_requests.labels(backend=BACKEND, kind=kind)
                          for kind in ("read", "cas", "serial_read")}
        self._uncounted = dict.fromkeys(self._counters, 0)  # requests sent, not yet added to their counter
        self._sent: dict[Tag, tuple[Any, Sequence[Any] | None, int]] = {}  # request, values, attempt
        self._lwts: dict[int, tuple[Row, Row]] = {}  # tag -> (key row, stored row wanted)
        self._later: list[tuple[float, Tag]] = []  # retries waiting for their backoff

    @property
    def queued(self) -> int:
        return self.stream.queued + len(self._later)

    def plan(self, keys: Sequence[Hashable]) -> list[Any]:
        return [READ] * len(keys)

    def read(self, tag: int, key: Hashable) -> None:
        statement, key_row = self.backing.read_request(key)
        self._send(("read", tag), statement, key_row)

    def cas(self, tag: int, key: Hashable, expected: Any, value: Any) -> None:
        statement, values, key_row, wanted = self.backing.cas_request(key, expected, value)
        self._lwts[tag] = (key_row, wanted)
        self._send(("cas", tag), statement, values)

    def answers(self) -> list[tuple[int, Answer]]:
        while self._sent:
            self._send_due()
            wait = max(0.0, self._later[0][0] - time.monotonic()) if self._later else None
            self._count()
            out = [a for tag, outcome in self.stream.take(max(1, self.size // 4), wait)
                   if (a := self._answer(tag, outcome)) is not None]  # type: ignore[arg-type]
            if out:
                return out
        return []

    def close(self, failed: bool) -> None:
        """Forget what was not sent; wait for the answers of what was (no write left in the air)."""
        self.stream.drop_queued()
        self._later.clear()
        self._count()
        while self.stream.outstanding:
            self.stream.take(self.stream.outstanding, self.client.settings.request_timeout_s + 1.0)

    def _answer(self, tag: Tag, outcome: tuple[bool, Any]) -> tuple[int, Answer] | None:
        """The caller's answer to ``outcome``, or None when another request was sent for it."""
        kind, i = tag
        ok, value = outcome
        statement, values, attempt = self._sent.pop(tag)
        if ok:
            if kind == "read":
                return i, Stored(self.backing.decode_read(value))
            if kind == "cas":
                del self._lwts[i]
                return i, self.backing.decode_cas(value)
            _, wanted = self._lwts.pop(i)
            row = value.one()
            current = None if row is None else tuple(row)
            if settle(current, wanted, self.backing.metrics):
                return i, CasResult(True)
            return i, CasResult(False, self.backing.value_of_row(current))
        decision = decide(value, lwt=kind == "cas")
        if decision is Decision.RAISE:  # an invalid request: the table is gone, or it refuses the row
            key_row = self._lwts[i][0] if kind != "read" else values
            typed = self.backing.refused(value, None if key_row is None else tuple(key_row))
            if typed is value:
                raise value
            raise typed from value
        if decision is Decision.RESOLVE:  # an LWT of unknown outcome: read its row at SERIAL
            self._send(("serial_read", i), serial(self.client, self.backing.select, self._lwts[i][0]), None)
            return None
        if attempt >= self.client.settings.max_retries:
            if kind == "serial_read":
                self.backing.metrics.cas_unknown.labels(resolution="unresolved").inc()
                raise UnknownOutcomeError(self._lwts[i][0], value) from value
            raise value
        s = self.client.settings
        self._sent[tag] = (statement, values, attempt + 1)
        heapq.heappush(self._later, (time.monotonic() + backoff_s(attempt, s.backoff_initial_s, s.backoff_max_s), tag))
        return None

    def _send(self, tag: Tag, statement: Any, values: Sequence[Any] | None, attempt: int = 0) -> None:
        self._sent[tag] = (statement, values, attempt)
        self._uncounted[tag[0]] += 1
        self.stream.send(tag, statement, values)

    def _count(self) -> None:
        """Add the requests sent since the last call to their counters."""
        for kind, n in self._uncounted.items():
            if n:
                self._counters[kind].inc(n)
                self._uncounted[kind] = 0

    def _send_due(self) -> None:
        now = time.monotonic()
        while self._later and self._later[0][0] <= now:
            _, tag = heapq.heappop(self._later)
            statement, values, attempt = self._sent[tag]
            self._send(tag, statement, values, attempt)
