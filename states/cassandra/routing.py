"""Routing around a hung node: a host that left a request unanswered until the client's timeout goes last.

A node that hangs (a long GC pause, a stalled disk, SIGSTOP) keeps its sockets open, so the driver never marks it
down: token-aware routing keeps choosing it as coordinator for a third of the keys of an RF 3 keyspace, and every
such request waits out ``request_timeout_s``. With one replica of three hung a quorum still answers, but only
through the other two coordinators. :class:`AvoidUnanswering` wraps the routing policy: once a request to a host
times out on the client (``OperationTimedOut``, a hung coordinator, not a coordinator reporting a slow replica),
that host goes last in every query plan for ``penalty_s``, so the retry, the serial read that resolves an unknown
LWT outcome and the next txid's requests go to the replicas that answer. It is still tried when nothing else is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from cassandra.policies import LoadBalancingPolicy, WrapperPolicy


class Unanswering:
    """The hosts that recently left a request unanswered, and until when they go last (shared by the profiles)."""

    def __init__(self, penalty_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.penalty_s, self._clock = penalty_s, clock
        self._until: dict[Any, float] = {}
        self._lock = threading.Lock()

    def mark(self, host: Any) -> None:
        with self._lock:
            self._until[host] = self._clock() + self.penalty_s

    def hung(self, host: Any) -> bool:
        until = self._until.get(host)
        if until is None:
            return False
        if until <= self._clock():
            with self._lock:  # forget it, unless a request marked it again meanwhile
                if self._until.get(host, 0.0) <= self._clock():
                    self._until.pop(host, None)
            return False
        return True


class AvoidUnanswering(WrapperPolicy):  # type: ignore[misc]  # the driver is untyped
    """``child``'s query plans with the hosts of :class:`Unanswering` moved to the end, in the child's order."""

    def __init__(self, child: LoadBalancingPolicy, unanswering: Unanswering) -> None:
        super().__init__(child)
        self.unanswering = unanswering

    def make_query_plan(self, working_keyspace: str | None = None, query: Any = None) -> Iterator[Any]:
        later = []
        for host in self._child_policy.make_query_plan(working_keyspace, query):
            if self.unanswering.hung(host):
                later.append(host)
            else:
                yield host
        yield from later
