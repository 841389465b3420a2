"""`CqlServer`: a single fake Cassandra node on a TCP port, plus the test-facing API.

Threads: one acceptor, one reader per client connection, and a worker pool
executing requests. All state lives in the `Engine`; this module wires sockets,
counters and faults around it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

from .binding import collect_variables
from .connection import ClientConnection
from .engine import Engine, ExecOptions
from .faults import Fault, FaultInjector
from .results import Rows, SchemaChange, rows_as_dicts
from .schema import Table
from .stats import RequestRecord, Stats, StatsCollector
from .system_tables import NodeInfo
from .wire import UNSET

log = logging.getLogger(__name__)


class CqlServer:
    """A CQL native-protocol (v4/v5) server backed by in-memory tables.

    >>> with CqlServer() as server:
    ...     cluster = Cluster(["127.0.0.1"], port=server.port)
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, username: str | None = None,
                 password: str | None = None, data_center: str = "datacenter1", rack: str = "rack1",
                 cluster_name: str = "Test Cluster", release_version: str = "4.1.5",
                 protocol_versions: tuple[int, ...] = (4, 5), max_workers: int = 64) -> None:
        if (username is None) != (password is None):
            raise ValueError("username and password go together")
        if not set(protocol_versions) <= {4, 5} or not protocol_versions:
            raise ValueError("supported protocol versions are 4 and 5")
        self.host = host
        self._requested_port = port
        self.username, self.password = username, password
        self.protocol_versions = tuple(sorted(protocol_versions))
        rpc_address = "127.0.0.1" if host in ("0.0.0.0", "") else host
        self.engine = Engine(NodeInfo(rpc_address, port, data_center, rack, cluster_name, release_version,
                                      native_protocol_version=str(max(protocol_versions))))
        self.engine.schema_listeners.append(self._broadcast_schema_change)
        self.faults = FaultInjector()
        self.stats_collector = StatsCollector()
        self._max_workers = max_workers
        self._listener: socket.socket | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._connections: set[ClientConnection] = set()
        self._lock = threading.Lock()
        self._accept_thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> Self:
        """Bind and listen; returns once connections are accepted (in background threads)."""
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self._requested_port))
        listener.listen(128)
        self._listener = listener
        self._requested_port = self.port  # a later start() (node "restart") reuses the port
        self.engine.node.port = self.port
        self._pool = ThreadPoolExecutor(self._max_workers, thread_name_prefix="cqlserver-worker")
        self._accept_thread = threading.Thread(target=self._accept_loop, name="cqlserver-accept", daemon=True)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        """Close the listener and every client connection; data is kept, and `start()` again
        listens on the same port (a node restart, as far as clients can tell)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        self.disconnect_clients()
        if self._accept_thread is not None:
            self._accept_thread.join(timeout=2)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._listener is None:
            return self._requested_port
        return int(self._listener.getsockname()[1])

    @property
    def contact_point(self) -> str:
        """"host:port", e.g. for configuration strings."""
        return f"{self.host}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    # -- connections -----------------------------------------------------------
    def _accept_loop(self) -> None:
        while self._listener is not None:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                break
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = ClientConnection(self, sock)
            with self._lock:
                self._connections.add(conn)
            threading.Thread(target=conn.run, name="cqlserver-conn", daemon=True).start()

    def _forget(self, conn: ClientConnection) -> None:
        with self._lock:
            self._connections.discard(conn)

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        pool = self._pool
        if pool is None:
            return
        try:  # noqa: SIM105  the except reads as the intent
            pool.submit(fn, *args)
        except RuntimeError:  # pool shut down during stop()
            pass

    def disconnect_clients(self) -> None:
        """Close every client connection (the driver will reconnect)."""
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.close()

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def _broadcast_schema_change(self, change: SchemaChange) -> None:
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            conn.push_schema_change(change)

    # -- counting --------------------------------------------------------------
    def stats(self) -> Stats:
        """Snapshot of request counters since the last `reset_counts()`."""
        return self.stats_collector.snapshot(self.faults.fired_total)

    def request_count(self, kind: str | None = None, *, include_system: bool = False) -> int:
        """Requests since reset; `kind` is an opcode (QUERY, PREPARE, EXECUTE, BATCH, OPTIONS, ...)
        or a statement kind (select, insert, update, delete, batch, ddl)."""
        snap = self.stats()
        counters = [snap.requests] + ([snap.system_requests] if include_system else [])
        if kind is None:
            return sum(sum(c.values()) for c in counters)
        if kind.isupper():
            return sum(c.get(kind, 0) for c in counters)
        return snap.statements.get(kind, 0)

    def request_log(self, include_system: bool = False) -> list[RequestRecord]:
        return self.stats_collector.log(include_system)

    def reset_counts(self) -> None:
        self.stats_collector.reset()
        self.faults.fired_total = 0

    # -- faults ------------------------------------------------------------------
    def inject(self, fault: Fault) -> Fault:
        """Queue a fault; returns it so tests can read `fault.fired` / `fault.seen`."""
        return self.faults.add(fault)

    def clear_faults(self) -> None:
        self.faults.clear()

    # -- data ------------------------------------------------------------------
    @property
    def tables(self) -> dict[str, Table]:
        """Schema of every user table, keyed "keyspace.table"."""
        with self.engine.lock:
            return {t.qualified: t for ks in self.engine.catalog.keyspaces.values() if not ks.system
                    for t in ks.tables.values()}

    def rows(self, keyspace: str, table: str) -> list[dict[str, Any]]:
        """Live rows of a table as dicts (partition token order, then clustering order).

        Values are what the driver returns (timestamp: naive UTC datetime; sets: frozenset)."""
        return self.engine.rows(keyspace, table)

    def execute(self, cql: str, params: list[Any] | tuple[Any, ...] = (), keyspace: str | None = None) -> list[dict[str, Any]]:
        """Run CQL directly (no network, no counting, no faults); returns rows as dicts.

        `params` are Python values bound to `?` markers (timestamps as datetime or ms since epoch).
        """
        engine = self.engine
        parsed = engine.parse(cql)
        with engine.lock:
            variables = collect_variables(parsed, engine.catalog, keyspace)
            raw = [None if v is None else UNSET if v is UNSET else var.spec.type.encode(var.spec.type.coerce(v))
                   for var, v in zip(variables, params, strict=False)]
            result = engine.execute(parsed, keyspace, raw, ExecOptions(), variables=variables)
        return rows_as_dicts(result) if isinstance(result, Rows) else []

    def advance_clock(self, seconds: float) -> None:
        """Move the server clock forward (TTLs expire as if `seconds` had passed)."""
        self.engine.clock.advance(seconds)

    def truncate_all(self) -> None:
        """Remove all rows of all tables, keeping the schema."""
        self.engine.truncate_all()

    @property
    def data_center(self) -> str:
        return self.engine.node.data_center
