"""Cassandra's refusals, typed by the driver's own classes: wrong credentials, a missing grant, an untrusted certificate.

The DataStax driver raises ``AuthenticationFailed`` for a refused login, ``Unauthorized`` for a
missing grant, and a connection that fails on every contact point as ``NoHostAvailable`` holding
each host's error (a TLS handshake's ``ssl.SSLError`` among them). :func:`refused` reads them with
``isinstance`` only, never from their names or text, and returns a :class:`CassandraRefusal` that
names the hosts, the role and the setting an operator checks. A refusal is permanent: no retry
mends it. A bare TLS error could come from any server, so only a ``NoHostAvailable`` makes it
Cassandra's.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cassandra import AuthenticationFailed, DriverException, Unauthorized
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import ErrorMessage

AUTHENTICATION, AUTHORIZATION, TLS = "authentication", "authorization", "TLS"

#: What an operator checks for each kind of refusal.
SETTINGS = {
    AUTHENTICATION: "cassandra.username and cassandra.password (TRIDENT_CASSANDRA_PASSWORD)",
    AUTHORIZATION: "the grants of the role (docs/operations.md lists the ones the service needs)",
    TLS: "cassandra.tls.ca_file (the CA that signed the node's certificate) and cassandra.tls.check_hostname",
}

#: Every error the driver raises of its own (its connection errors included), for callers that treat them alike.
DRIVER_ERRORS: tuple[type[BaseException], ...] = (DriverException, NoHostAvailable, ConnectionException, ErrorMessage)


@dataclass(frozen=True, slots=True)
class CassandraRefusal:
    """A refusal of ``kind`` (:data:`AUTHENTICATION`, :data:`AUTHORIZATION` or :data:`TLS`) by ``hosts`` (empty
    when the error names none) for ``role`` (None when unknown); ``detail`` is the driver's text, for people."""

    kind: str
    hosts: tuple[str, ...]
    role: str | None
    detail: str

    @property
    def setting(self) -> str:
        """The settings to check for this kind of refusal."""
        return SETTINGS[self.kind]

    @property
    def line(self) -> str:
        """One line without secrets: the kind, the hosts, the role, the driver's words and the setting to check."""
        at = f" at {', '.join(self.hosts)}" if self.hosts else ""
        who = f" for role {self.role}" if self.role else ""
        return f"{self.kind} refused by Cassandra{at}{who}: {self.detail[:300]}; check {self.setting}"


def kind_of(error: BaseException) -> str | None:
    """The kind of refusal ``error`` is by its class alone (a TLS error included), or None."""
    if isinstance(error, AuthenticationFailed):
        return AUTHENTICATION
    if isinstance(error, Unauthorized):
        return AUTHORIZATION
    if isinstance(error, ssl.SSLError):
        return TLS
    return None


def refused(error: BaseException, role: str | None = None) -> CassandraRefusal | None:
    """The refusal ``error`` is: an ``AuthenticationFailed`` or ``Unauthorized``, or a ``NoHostAvailable`` whose
    every host refused alike (TLS included); None for anything else (one host merely away is an outage)."""
    if isinstance(error, NoHostAvailable):
        return _every_host_refused(error, role)
    kind = kind_of(error)
    if kind is None or kind == TLS:  # a bare TLS error could be any server's: only a NoHostAvailable names it
        return None
    return CassandraRefusal(kind, (), role, _one_line(error))


def _every_host_refused(error: NoHostAvailable, role: str | None) -> CassandraRefusal | None:
    nested = error.errors if isinstance(error.errors, dict) else {}
    causes = list(nested.values())
    if not causes or not all(isinstance(c, BaseException) for c in causes):
        return None
    kinds = {kind_of(c) for c in causes}
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is None:
        return None
    return CassandraRefusal(kind, tuple(str(h) for h in nested), role, _one_line(causes[0]))


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
