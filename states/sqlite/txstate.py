"""SqliteTransactionalStateStore: transactional-state documents and the coordinator lease in SQLite."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from states.errors import LeaseHeldError, LeaseLostError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import Json, LeaseInfo
from states.spec import check_identifier
from states.sqlite.connection import Connections, quote
from states.sqlite.schema import validate_table


class SqliteTransactionalStateStore:
    """Documents of one topology plus its lease (owner, epoch, expiry), fenced by the epoch.

    Two tables, shared by every topology in the file: ``<table>`` (topology, key, value as JSON
    text) and ``<table>_lease`` (topology, owner, epoch, expires_at). Every lease operation and
    every ``put``/``delete`` is one ``BEGIN IMMEDIATE`` transaction that checks the epoch and
    writes, so a fenced-off coordinator in another process changes nothing. ``clock`` is wall
    time by default (shared by the processes of a machine, and meaningful after a reboot, which
    a monotonic clock is not); tests inject a fake one to expire leases.
    """

    def __init__(self, path: str | Path, topology_id: str, *, table: str = "trident_state",
                 clock: Callable[[], float] = time.time, busy_timeout_s: float = 30.0,
                 synchronous: str = "FULL", metrics: StateMetrics = STATE_METRICS) -> None:
        self.path, self.topology_id, self.metrics, self._clock = str(path), topology_id, metrics, clock
        self.table = check_identifier(table, "table name")
        self._conns = Connections(path, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self._docs, self._lease = quote(self.table), quote(check_identifier(f"{self.table}_lease", "table name"))
        with self._conns.immediate() as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._docs} (topology text, key text, value text, "
                         f"PRIMARY KEY (topology, key)) WITHOUT ROWID")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {self._lease} (topology text PRIMARY KEY, owner text, "
                         f"epoch bigint, expires_at double)")
            validate_table(conn, self.table, (("topology", "text"), ("key", "text"), ("value", "text")),
                           ["topology", "key"])
            validate_table(conn, f"{self.table}_lease", (("topology", "text"), ("owner", "text"),
                           ("epoch", "bigint"), ("expires_at", "double")), ["topology"])

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "topology_id": self.topology_id, "table": self.table,
                "busy_timeout_s": self._conns.busy_timeout_s, "synchronous": self._conns.synchronous}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling re-runs __init__ so connections are reopened here (mypy flags calls of __init__ on an instance).
        self.__init__(state.pop("path"), state.pop("topology_id"), **state)  # type: ignore[misc]

    def close(self) -> None:
        self._conns.close()

    # documents
    def get(self, key: str) -> Json | None:
        self._count("read")
        row = self._conns.get().execute(f"SELECT value FROM {self._docs} WHERE topology = ? AND key = ?",
                                        (self.topology_id, key)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: Json, *, epoch: int) -> None:
        doc = json.dumps(value, ensure_ascii=False)
        self._count("write")
        with self._conns.immediate() as conn:
            self._check_epoch(conn, epoch)
            conn.execute(f"INSERT INTO {self._docs} (topology, key, value) VALUES (?, ?, ?) "
                         f"ON CONFLICT (topology, key) DO UPDATE SET value = excluded.value",
                         (self.topology_id, key, doc))

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        self._count("write")
        with self._conns.immediate() as conn:
            self._check_epoch(conn, epoch)
            conn.executemany(f"DELETE FROM {self._docs} WHERE topology = ? AND key = ?",
                             [(self.topology_id, k) for k in keys])

    def keys(self, prefix: str) -> list[str]:
        self._count("read")
        rows = self._conns.get().execute(
            f"SELECT key FROM {self._docs} WHERE topology = ? AND substr(key, 1, ?) = ?",
            (self.topology_id, len(prefix), prefix))
        return sorted(r[0] for r in rows)

    # lease
    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        self._count("lease")
        with self._conns.immediate() as conn:
            held_by, epoch, expires = self._lease_row(conn)
            now = self._clock()
            if held_by not in (None, owner) and now < expires:
                raise LeaseHeldError(self.topology_id, held_by, epoch)
            conn.execute(f"INSERT INTO {self._lease} (topology, owner, epoch, expires_at) VALUES (?, ?, ?, ?) "
                         f"ON CONFLICT (topology) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, "
                         f"expires_at = excluded.expires_at", (self.topology_id, owner, epoch + 1, now + ttl_s))
            return epoch + 1

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        self._count("lease")
        with self._conns.immediate() as conn:
            held_by, current, expires = self._lease_row(conn)
            now = self._clock()
            if held_by != owner or current != epoch or now >= expires:
                raise LeaseLostError(self.topology_id, epoch, current)
            conn.execute(f"UPDATE {self._lease} SET expires_at = ? WHERE topology = ?", (now + ttl_s, self.topology_id))

    def release_lease(self, owner: str, epoch: int) -> None:
        self._count("lease")
        with self._conns.immediate() as conn:
            conn.execute(f"UPDATE {self._lease} SET owner = NULL, expires_at = 0 "
                         f"WHERE topology = ? AND owner = ? AND epoch = ?", (self.topology_id, owner, epoch))

    def lease_info(self) -> LeaseInfo | None:
        """The current holder; ``expires_at`` converted from the store's clock to wall-clock seconds."""
        self._count("read")
        held_by, epoch, expires = self._lease_row(self._conns.get())
        remaining = expires - self._clock()
        if held_by is None or remaining <= 0:
            return None
        return LeaseInfo(held_by, epoch, time.time() + remaining)

    def _lease_row(self, conn: sqlite3.Connection) -> tuple[str | None, int, float]:
        row = conn.execute(f"SELECT owner, epoch, expires_at FROM {self._lease} WHERE topology = ?",
                           (self.topology_id,)).fetchone()
        return (None, 0, 0.0) if row is None else (row[0], row[1], row[2])

    def _check_epoch(self, conn: sqlite3.Connection, epoch: int) -> None:
        _, current, _ = self._lease_row(conn)
        if current != epoch:
            raise LeaseLostError(self.topology_id, epoch, current)

    def _count(self, kind: str) -> None:
        self.metrics.state_requests.labels(backend="sqlite", kind=kind).inc()
