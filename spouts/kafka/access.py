"""Refused credentials and untrusted certificates, told apart from outages, for every librdkafka client.

librdkafka reports a wrong password or an untrusted broker certificate only to the client's error
callback (and its log): the requests themselves fail with ``_TRANSPORT`` or time out, which looks
like a broker that is away. :class:`AccessWatch` is that callback: it keeps the last refusal, and
:meth:`AccessWatch.check` turns it into :class:`~spouts.errors.AccessRefusedError`, a permanent
error, once the client failed. :func:`refused` types a refusal carried by an error code (a missing
ACL comes back on the request). :func:`watched` also gives the client the product's librdkafka logger
(:mod:`spouts.kafka.client_log`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError

from spouts.errors import AccessRefusedError
from spouts.kafka.client_log import LIBRDKAFKA_LOG as LIBRDKAFKA_LOG  # noqa: PLC0414  (re-exported: spouts.kafka.native takes it from here)
from spouts.kafka.client_log import logged

AUTHENTICATION, AUTHORIZATION, TLS = "authentication", "authorization", "TLS"

#: librdkafka and broker error codes that mean "refused", by kind.
REFUSALS: dict[int, str] = {
    KafkaError._AUTHENTICATION: AUTHENTICATION,  # librdkafka's local error codes are public, named with a leading underscore
    KafkaError.SASL_AUTHENTICATION_FAILED: AUTHENTICATION,
    KafkaError.UNSUPPORTED_SASL_MECHANISM: AUTHENTICATION,
    KafkaError._SSL: TLS,  # as above
    KafkaError.TOPIC_AUTHORIZATION_FAILED: AUTHORIZATION,
    KafkaError.GROUP_AUTHORIZATION_FAILED: AUTHORIZATION,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: AUTHORIZATION,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: AUTHORIZATION,
}

def principal(conf: Mapping[str, Any]) -> str:
    """The user the client presents: ``User:<sasl.username>``, or what it uses instead (never a secret)."""
    user = conf.get("sasl.username")
    if user:
        return f"User:{user}"
    protocol = str(conf.get("security.protocol", "plaintext")).lower()
    return "its TLS client certificate" if protocol == "ssl" else f"ANONYMOUS ({protocol}, no sasl.username)"


def setting_to_check(kind: str, conf: Mapping[str, Any], what: str = "") -> str:
    """The settings an operator checks for a refusal of ``kind`` (``what``: the refused object, if known)."""
    if kind == TLS:
        return "ssl.ca.location (the CA that signed the broker's certificate) and security.protocol"
    if kind == AUTHORIZATION:
        on = f" on {what}" if what else ""
        return f"the ACLs of {principal(conf)}{on} (docs/operations.md lists the ones the service needs)"
    return f"sasl.username, sasl.password and sasl.mechanism ({conf.get('sasl.mechanism', 'GSSAPI')})"


def refused(err: KafkaError | None, conf: Mapping[str, Any], what: str = "") -> AccessRefusedError | None:
    """The refusal ``err`` carries (None when it is no refusal)."""
    if err is None:
        return None
    kind = REFUSALS.get(err.code())
    if kind is None:
        return None
    servers = str(conf.get("bootstrap.servers", "?"))
    detail = " ".join(err.str().split())
    if what and what not in detail:
        detail = f"{what}: {detail}"
    return AccessRefusedError(kind, servers, principal(conf), setting_to_check(kind, conf, what), detail)


class AccessWatch:
    """A client's ``error_cb``: remembers the last refusal librdkafka reported since the client's last success
    (called from ``poll``)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self.conf = {k: v for k, v in conf.items() if k in ("bootstrap.servers", "sasl.username", "sasl.mechanism",
                                                            "security.protocol")}
        self._lock = threading.Lock()
        self._refused: AccessRefusedError | None = None

    def __call__(self, err: KafkaError) -> None:
        found = refused(err, self.conf)
        if found is not None:
            with self._lock:
                self._refused = found

    def clear(self) -> None:
        """Forget what was told: called after a request succeeded, so a refusal seen once (a handshake cut
        short while a broker restarted) never turns a later outage into a permanent stop."""
        with self._lock:
            self._refused = None

    @property
    def refusal(self) -> AccessRefusedError | None:
        with self._lock:
            return self._refused

    def check(self, client: Any = None) -> None:
        """Raise the refusal seen so far; serves ``client``'s callbacks first (``poll(0)``) if given."""
        if client is not None:
            serve(client)
        found = self.refusal
        if found is not None:
            raise found


def serve(client: Any) -> None:
    """Serve a client's queued callbacks (errors, logs) without waiting; a closed client has none."""
    with contextlib.suppress(RuntimeError, ValueError):  # closed
        client.poll(0)


def watched(conf: Mapping[str, Any]) -> tuple[dict[str, Any], AccessWatch]:
    """``conf`` with an :class:`AccessWatch` as its error callback and :data:`LIBRDKAFKA_LOG` as its logger."""
    watch = AccessWatch(conf)
    return logged({**conf, "error_cb": watch}), watch
