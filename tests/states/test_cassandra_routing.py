"""A host that left a request unanswered goes last in the query plans for a while (states.cassandra.routing), and the
request window marks it from the driver's client-side timeout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cassandra import OperationTimedOut, WriteTimeout
from cassandra.cluster import EXEC_PROFILE_DEFAULT

from states.cassandra.routing import AvoidUnanswering, Unanswering
from states.cassandra.window import RequestStream


class Plan:
    """A child policy whose plan is fixed."""

    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts

    def make_query_plan(self, working_keyspace: str | None = None, query: Any = None) -> Iterator[str]:
        return iter(self.hosts)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_unanswering_host_goes_last_until_its_penalty_ends() -> None:
    """The child's order is kept for the others; after ``penalty_s`` the host is back in its place."""
    clock = Clock()
    unanswering = Unanswering(penalty_s=30.0, clock=clock)
    policy = AvoidUnanswering(Plan(["a", "b", "c"]), unanswering)
    assert list(policy.make_query_plan()) == ["a", "b", "c"]
    unanswering.mark("a")
    assert list(policy.make_query_plan()) == ["b", "c", "a"]  # still tried when nothing else answers
    unanswering.mark("c")
    assert list(policy.make_query_plan()) == ["b", "a", "c"]
    clock.now += 30.0
    assert list(policy.make_query_plan()) == ["a", "b", "c"]


class FailingFuture:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def add_callbacks(self, callback: Any, errback: Any, callback_args: tuple[Any, ...] = (),
                      errback_args: tuple[Any, ...] = ()) -> None:
        errback(self.error, *errback_args)


class Session:
    """What the request stream uses of a driver session: every request fails with ``error``."""

    def __init__(self, policy: AvoidUnanswering, error: BaseException) -> None:
        self.error = error
        profile = type("Profile", (), {"load_balancing_policy": policy})()
        manager = type("Manager", (), {"profiles": {EXEC_PROFILE_DEFAULT: profile}})()
        self.cluster = type("Cluster", (), {"profile_manager": manager})()

    def execute_async(self, statement: Any, values: Any, execution_profile: Any) -> FailingFuture:
        return FailingFuture(self.error)


def test_a_client_side_timeout_marks_its_coordinator_and_a_server_timeout_does_not() -> None:
    """OperationTimedOut names the coordinator that never answered (a hung node); a WriteTimeout comes from a
    coordinator that answered (a slow replica behind it), so it stays where it is."""
    for error, marked in ((OperationTimedOut(last_host="b"), True),
                          (WriteTimeout("slow replica", write_type=0), False)):
        unanswering = Unanswering(penalty_s=30.0)
        policy = AvoidUnanswering(Plan(["a", "b", "c"]), unanswering)
        stream = RequestStream(Session(policy, error), 4, EXEC_PROFILE_DEFAULT)
        stream.send("t", "SELECT 1", None)
        [(tag, (ok, got))] = stream.take(1, timeout=5)
        assert (tag, ok, got) == ("t", False, error)
        assert unanswering.hung("b") is marked
        assert list(policy.make_query_plan()) == (["a", "c", "b"] if marked else ["a", "b", "c"])
