"""One Cassandra cluster and session per process and settings, with prepared statements and retries.

:func:`shared_client` is what backing maps and stores use: Spark executors open one session per
Python worker process and reuse it for every batch (a forked child opens its own). A
:class:`CassandraClient` of its own (``CassandraClient(settings)``) is for tests that need a
second, independent session, e.g. a zombie writer.

Routing is token-aware over the local data centre, every request uses the settings'
consistency, the driver never retries by itself (:class:`FallthroughRetryPolicy`): retries and
unknown outcomes are decided in ``states.cassandra.retry``, visibly and with metrics.
"""

from __future__ import annotations

import os
import ssl
import threading
import time
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import (
    EXEC_PROFILE_DEFAULT,
    Cluster,
    ExecutionProfile,
    ResultSet,
    Session,
)
from cassandra.policies import (
    DCAwareRoundRobinPolicy,
    ExponentialReconnectionPolicy,
    FallthroughRetryPolicy,
    TokenAwarePolicy,
)
from cassandra.query import PreparedStatement, dict_factory, tuple_factory

from states.cassandra.retry import Decision, backoff_s, decide
from states.cassandra.routing import AvoidUnanswering, Unanswering
from states.cassandra.settings import CassandraSettings, TlsSettings
from states.cassandra.window import AsyncWindow
from states.metrics import StateMetrics

Request = tuple[Any, Sequence[Any] | None]  # (statement, its values; None when already bound)
BACKEND = "cassandra"
TUPLES = "tuples"  # the execution profile with tuple rows: the hot path's cheap row factory
# Unless the settings name a version, the protocol is negotiated down from v4: v5 wraps every frame in checksummed
# segments that the Python driver encodes and checks in Python, about a third of its CPU per LWT (measured in
# docs/performance.md, "The Cassandra commit"); every Cassandra since 2.2 speaks v4.
NEGOTIATE_FROM = 4
UNANSWERED_PENALTY_S = 30.0  # at least: a host that left a request unanswered goes last in the query plans this long


def ssl_context(tls: TlsSettings) -> ssl.SSLContext | None:
    """The TLS context for ``tls`` (None when disabled)."""
    if not tls.enabled:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file)
    ctx.check_hostname = tls.check_hostname
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return ctx


class CassandraClient:
    """A connected session plus its prepared statements and the request loop with retries."""

    def __init__(self, settings: CassandraSettings) -> None:
        self.settings = settings
        s = settings
        self.unanswering = Unanswering(penalty_s=max(UNANSWERED_PENALTY_S, 3 * s.request_timeout_s))
        auth = PlainTextAuthProvider(s.username, s.password.get()) if s.username and s.password else None
        kwargs: dict[str, Any] = {"protocol_version": s.protocol_version} if s.protocol_version else {}
        self.cluster = Cluster(list(s.contact_points), port=s.port, auth_provider=auth, ssl_context=ssl_context(s.tls),
                               execution_profiles={EXEC_PROFILE_DEFAULT: _profile(s, dict_factory, self.unanswering),
                                                   TUPLES: _profile(s, tuple_factory, self.unanswering)},
                               connect_timeout=s.connect_timeout_s,
                               reconnection_policy=ExponentialReconnectionPolicy(s.reconnect_base_s, s.reconnect_max_s),
                               # A node coming back up would otherwise get every statement this process ever
                               # prepared re-prepared before its pool opens (slow with many tables); an
                               # unknown statement is re-prepared on first use anyway.
                               reprepare_on_up=False, **kwargs)
        if not s.protocol_version:
            self.cluster.protocol_version = NEGOTIATE_FROM  # not pinned: the driver may still go lower
        try:
            self.session: Session = self.cluster.connect()
        except BaseException:
            self.cluster.shutdown()  # don't leave the driver's threads behind
            raise
        self.serial = ConsistencyLevel.name_to_value[s.serial_consistency]
        self._prepared: dict[str, PreparedStatement] = {}
        self.validated_tables: set[Hashable] = set()  # table shapes states.cassandra.schema checked this session
        self.table_shards: dict[tuple[str, str], int] = {}  # (keyspace, table) -> shards it was created with
        self._lock = threading.Lock()

    def prepare(self, cql: str, *, idempotent: bool) -> PreparedStatement:
        """``cql`` prepared once per session (concurrent first calls may both prepare: harmless)."""
        stmt = self._prepared.get(cql)
        if stmt is None:
            stmt = self.session.prepare(cql)
            stmt.is_idempotent = idempotent
            with self._lock:
                stmt = self._prepared.setdefault(cql, stmt)
        return stmt

    def run(self, requests: Sequence[Request], *, kind: str, metrics: StateMetrics,
            lwt: bool = False, profile: object = EXEC_PROFILE_DEFAULT) -> list[ResultSet | BaseException]:
        """Execute ``requests`` in one async window (at most ``max_concurrency`` in flight).

        ``profile``: :data:`TUPLES` for rows as tuples (the hot path), else rows as dicts.

        Returns, in order, each request's ResultSet, or its exception when it failed for good
        (after retries for reads and plain writes; at once for ``lwt``, so the caller resolves it).
        A non-transient error is raised.
        """
        out: list[ResultSet | BaseException | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        for attempt in range(self.settings.max_retries + 1):
            counter = metrics.state_requests.labels(backend=BACKEND, kind=kind)
            counter.inc(len(pending))
            results = self.window([requests[i] for i in pending], profile)
            again = []
            for i, (ok, value) in zip(pending, results, strict=True):
                if ok:
                    out[i] = value
                    continue
                decision = decide(value, lwt=lwt)
                if decision is Decision.RAISE:
                    raise value
                if decision is Decision.RETRY and attempt < self.settings.max_retries:
                    again.append(i)
                else:
                    out[i] = value
            if not again:
                break
            time.sleep(backoff_s(attempt, self.settings.backoff_initial_s, self.settings.backoff_max_s))
            pending = again
        done = [r for r in out if r is not None]
        if len(done) != len(out):
            msg = "a request got neither a result set nor its final error"
            raise RuntimeError(msg)
        return done

    def window(self, requests: Sequence[Request], profile: object = EXEC_PROFILE_DEFAULT) -> list[tuple[bool, Any]]:
        """``(ok, ResultSet or error)`` per request, through one :class:`AsyncWindow` of ``max_concurrency``."""
        return AsyncWindow(self.session, requests, self.settings.max_concurrency, profile).run()

    def run_one(self, statement: Any, values: Sequence[Any] | None, *, kind: str,
                metrics: StateMetrics) -> ResultSet:
        """One read or idempotent write, retried; its ResultSet, or raise its final error."""
        result = self.run([(statement, values)], kind=kind, metrics=metrics)[0]
        if isinstance(result, BaseException):
            raise result
        return result

    def close(self) -> None:
        self.cluster.shutdown()


def _profile(s: CassandraSettings, row_factory: Any, unanswering: Unanswering) -> ExecutionProfile:
    """Routing, consistency and timeouts from ``s`` (each profile gets its own routing policy; a host that left a
    request unanswered goes last in both: :mod:`states.cassandra.routing`)."""
    return ExecutionProfile(
        load_balancing_policy=AvoidUnanswering(TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=s.local_dc)),
                                               unanswering),
        retry_policy=FallthroughRetryPolicy(),
        consistency_level=ConsistencyLevel.name_to_value[s.consistency],
        serial_consistency_level=ConsistencyLevel.name_to_value[s.serial_consistency],
        request_timeout=s.request_timeout_s,
        row_factory=row_factory,
    )


_shared: dict[tuple[CassandraSettings, int], CassandraClient] = {}
_shared_lock = threading.Lock()


def shared_client(settings: CassandraSettings) -> CassandraClient:
    """This process's client for ``settings``, connected on first use.

    Shared across keyspaces: statements name their keyspace, so maps of several keyspaces on one
    cluster use one session (the client's ``settings.keyspace`` is the first one asked for).
    """
    key = (replace(settings, keyspace="trident"), os.getpid())
    with _shared_lock:
        client = _shared.get(key)
        if client is None:
            client = _shared[key] = CassandraClient(settings)
        return client
