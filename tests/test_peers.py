"""REQUIRE_REAL_PEERS: an absent real peer is a skip by default and a failure naming it when required."""

from __future__ import annotations

import pytest

from tests.kafka.fixtures import skip_mock_gap
from tests.peers import REAL_CASSANDRA, missing_peer


@pytest.mark.parametrize("value", [None, "", "0"])
def test_an_absent_peer_is_skipped_by_default(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("REQUIRE_REAL_PEERS", raising=False)
    else:
        monkeypatch.setenv("REQUIRE_REAL_PEERS", value)
    with pytest.raises(pytest.skip.Exception, match="no cluster here"):
        missing_peer(REAL_CASSANDRA, "no cluster here")


def test_required_peers_turn_the_skip_into_a_failure_naming_the_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUIRE_REAL_PEERS", "1")
    with pytest.raises(pytest.fail.Exception, match=r"a real Cassandra is missing .*CASSANDRA_CONTACT_POINTS.*no cluster"):
        missing_peer(REAL_CASSANDRA, "no cluster here")


def test_a_skip_covered_by_another_real_peer_stays_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUIRE_REAL_PEERS", "1")
    with pytest.raises(pytest.skip.Exception):
        missing_peer(REAL_CASSANDRA, "the other peer runs it", covered=True)


def test_a_mock_gap_fails_only_when_no_real_kafka_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """With KAFKA_BOOTSTRAP_SERVERS set the real peer runs the check, so the mock's gap stays a skip."""
    monkeypatch.setenv("REQUIRE_REAL_PEERS", "1")
    monkeypatch.setattr("tests.kafka.fixtures.docker_problem", lambda: "no engine")
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    with pytest.raises(pytest.fail.Exception, match="a real Kafka is missing"):
        skip_mock_gap("the mock cannot")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "kafka:9092")
    with pytest.raises(pytest.skip.Exception, match="the mock cannot"):
        skip_mock_gap("the mock cannot")
