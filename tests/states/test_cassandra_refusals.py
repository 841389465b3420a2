"""Cassandra's refusals are recognised by the driver's classes, never by a class's name or a message's words."""

from __future__ import annotations

import ssl

import pytest
from cassandra import AuthenticationFailed, OperationTimedOut, Unauthorized
from cassandra.cluster import NoHostAvailable

from states.cassandra.refusals import AUTHENTICATION, AUTHORIZATION, TLS, CassandraRefusal, kind_of, refused


class MissingGrant(Unauthorized):
    """A subclass of the driver's class, named otherwise: still a refusal."""


def lookalike(name: str) -> type[Exception]:
    """A class that bears a driver class's name but is none of the driver's."""
    return type(name, (Exception,), {})


def test_each_kind_is_told_by_its_class() -> None:
    """AuthenticationFailed, Unauthorized (and subclasses) and ssl errors have their kinds; other errors none."""
    assert kind_of(AuthenticationFailed("bad")) == AUTHENTICATION
    assert kind_of(MissingGrant("no MODIFY")) == AUTHORIZATION
    assert kind_of(ssl.SSLCertVerificationError(1, "verify failed")) == TLS
    assert kind_of(OperationTimedOut("timed out")) is None


@pytest.mark.parametrize("name", ["AuthenticationFailed", "Unauthorized", "NoHostAvailable"])
def test_a_class_that_only_bears_a_driver_name_is_no_refusal(name: str) -> None:
    """Types decide: an error class named like the driver's (from another library, or a test) is no refusal."""
    error = lookalike(name)("Bad credentials")
    assert kind_of(error) is None
    assert refused(error) is None


def test_a_refusal_names_hosts_role_and_setting() -> None:
    """Every host's refusal of one kind is a refusal naming the hosts, the role and the setting to check."""
    found = refused(NoHostAvailable("Unable to connect", {"10.0.0.1:9042": AuthenticationFailed("Bad  credentials"),
                                                          "10.0.0.2:9042": AuthenticationFailed("Bad credentials")}),
                    role="trident")
    assert found == CassandraRefusal(AUTHENTICATION, ("10.0.0.1:9042", "10.0.0.2:9042"), "trident", "Bad credentials")
    assert found.line == ("authentication refused by Cassandra at 10.0.0.1:9042, 10.0.0.2:9042 for role trident: "
                          "Bad credentials; check cassandra.username and cassandra.password "
                          "(TRIDENT_CASSANDRA_PASSWORD)")


@pytest.mark.parametrize("errors", [
    {},  # no host tried
    {"a:9042": AuthenticationFailed("bad"), "b:9042": ConnectionRefusedError(111, "refused")},  # one merely away
    {"a:9042": AuthenticationFailed("bad"), "b:9042": Unauthorized("no grant")},  # two kinds
    {"a:9042": "not an error"},
])
def test_no_host_available_is_a_refusal_only_when_every_host_refused_alike(errors: dict[str, object]) -> None:
    assert refused(NoHostAvailable("Unable to connect", errors)) is None


def test_a_bare_tls_error_is_nobody_s_refusal() -> None:
    """A TLS error outside a NoHostAvailable could be any server's: only the driver's NoHostAvailable makes it
    Cassandra's."""
    bad = ssl.SSLCertVerificationError(1, "verify failed")
    assert refused(bad) is None
    assert refused(NoHostAvailable("Unable to connect", {"h:9042": bad})) == \
        CassandraRefusal(TLS, ("h:9042",), None, str(bad))
