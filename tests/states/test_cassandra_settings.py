"""Cassandra settings and the retry decision: pure, no cluster needed."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from cassandra import (
    OperationTimedOut,
    ReadTimeout,
    Unavailable,
    WriteTimeout,
    WriteType,
)
from cassandra.cluster import EXEC_PROFILE_DEFAULT
from cassandra.connection import ConnectionShutdown
from cassandra.policies import TokenAwarePolicy
from cassandra.protocol import OverloadedErrorMessage, ServerError, SyntaxException

from states.cassandra.retry import Decision, backoff_s, decide
from states.cassandra.routing import AvoidUnanswering
from states.cassandra.settings import CassandraSettings, Secret, TlsSettings
from states.errors import InvalidIdentifierError


class TestSettings:
    def test_defaults_are_the_documented_ones(self) -> None:
        """LOCAL_QUORUM for reads and writes, LOCAL_SERIAL for Paxos, keyspace trident on localhost:9042."""
        s = CassandraSettings()
        assert (s.consistency, s.serial_consistency, s.keyspace, s.contact_points, s.port) == (
            "LOCAL_QUORUM", "LOCAL_SERIAL", "trident", ("127.0.0.1",), 9042)

    def test_from_mapping_builds_typed_settings_and_hides_the_password(self) -> None:
        """A config section becomes typed settings; the password never shows in a repr and survives pickling."""
        s = CassandraSettings.from_mapping({
            "contact_points": "a.example, b.example", "port": 9142, "keyspace": "prod", "local_dc": "eu1",
            "username": "svc", "password": "hunter2", "tls": {"enabled": True, "ca_file": "/ca.pem"},
            "replication": {"class": "NetworkTopologyStrategy", "eu1": "3"}, "max_concurrency": 16})
        assert s.contact_points == ("a.example", "b.example")
        assert s.password == Secret("hunter2")
        assert s.tls == TlsSettings(enabled=True, ca_file="/ca.pem")
        assert s.replication == (("class", "NetworkTopologyStrategy"), ("eu1", "3"))
        assert "hunter2" not in repr(s)
        assert pickle.loads(pickle.dumps(s)) == s
        assert hash(s) == hash(pickle.loads(pickle.dumps(s)))

    @pytest.mark.parametrize("bad", [
        {"consistency": "SERIAL"}, {"serial_consistency": "QUORUM"}, {"username": "u"}, {"max_concurrency": 0},
        {"contact_points": ()}, {"colour": "blue"},
    ])
    def test_invalid_settings_are_refused(self, bad: dict) -> None:
        """Unknown keys, wrong consistency kinds, half-set credentials and empty contact points are errors."""
        with pytest.raises(ValueError):
            CassandraSettings.from_mapping(bad)

    def test_keyspace_is_an_identifier(self) -> None:
        """The keyspace reaches CQL text, so it must be a plain identifier."""
        with pytest.raises(InvalidIdentifierError):
            CassandraSettings(keyspace="Prod-Keyspace")


class TestRetryDecision:
    @pytest.mark.parametrize("error", [
        ReadTimeout("t"), Unavailable("u"), WriteTimeout("w", write_type=WriteType.SIMPLE),
        OverloadedErrorMessage(0x1001, "o", None), OperationTimedOut("client timeout"), ConnectionShutdown("gone"),
    ])
    def test_transient_errors_are_retried_for_reads_and_plain_writes(self, error: Exception) -> None:
        """Idempotent requests are simply sent again after a transient failure."""
        assert decide(error, lwt=False) is Decision.RETRY

    @pytest.mark.parametrize("error", [
        WriteTimeout("cas", write_type=WriteType.CAS), Unavailable("u"), OverloadedErrorMessage(0x1001, "o", None),
        OperationTimedOut("client timeout"), ConnectionShutdown("gone"),
    ])
    def test_transient_lwt_failures_are_resolved_never_retried(self, error: Exception) -> None:
        """A lightweight transaction that failed transiently has an unknown outcome: resolve it."""
        assert decide(error, lwt=True) is Decision.RESOLVE

    @pytest.mark.parametrize("error", [SyntaxException(0x2000, "bad", None), ServerError(0x0000, "bug", None),
                                       KeyError("x")])
    def test_other_errors_are_raised(self, error: Exception) -> None:
        """Bugs and invalid requests are never retried."""
        assert decide(error, lwt=False) is Decision.RAISE
        assert decide(error, lwt=True) is Decision.RAISE

    def test_backoff_grows_exponentially_with_jitter_up_to_the_cap(self) -> None:
        """Each retry waits between half and all of min(cap, initial * 2**attempt)."""
        for attempt, ceiling in [(0, 0.1), (1, 0.2), (3, 0.8), (10, 2.0)]:
            assert ceiling / 2 <= backoff_s(attempt, 0.1, 2.0) <= ceiling


def test_session_routes_token_aware_and_leaves_retries_to_us() -> None:
    """The execution profile is token-aware over the local DC and never retries by itself."""
    from cassandra.policies import FallthroughRetryPolicy

    from states.cassandra import session

    built: dict[str, Any] = {}

    class FakeCluster:
        def __init__(self, contact_points: list, **kwargs: object) -> None:
            built.update(kwargs, contact_points=contact_points)

        def connect(self) -> object:
            return object()

    original = session.Cluster  # type: ignore[attr-defined]  # the driver's class, as the module imported it
    session.Cluster = FakeCluster  # type: ignore[attr-defined]
    try:
        session.CassandraClient(CassandraSettings(local_dc="eu1", username="u", password=Secret("p"),
                                                  tls=TlsSettings(enabled=True)))
    finally:
        session.Cluster = original  # type: ignore[attr-defined]
    profile = built["execution_profiles"][EXEC_PROFILE_DEFAULT]
    routing = profile.load_balancing_policy
    assert isinstance(routing, AvoidUnanswering)  # a hung coordinator goes last (states.cassandra.routing)
    assert isinstance(routing._child_policy, TokenAwarePolicy)
    assert routing._child_policy._child_policy.local_dc == "eu1"
    assert isinstance(profile.retry_policy, FallthroughRetryPolicy)
    assert built["auth_provider"].username == "u"
    assert built["ssl_context"] is not None
