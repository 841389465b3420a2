"""SQLite connections: one per process and thread, WAL mode, ``BEGIN IMMEDIATE`` transactions.

Several processes on one machine may open the same file (a Spark executor per core): WAL lets
readers run beside the single writer, and every compare-and-set or lease operation runs in a
``BEGIN IMMEDIATE`` transaction, which takes the write lock *before* reading, so the read and the
write it is conditioned on are atomic across processes. A busy writer is waited for up to the
busy timeout. Connections are never pickled: an object holding a :class:`Connections` is rebuilt
from its path in the process that unpickles it, and a forked child opens its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})


class Connections:
    """Lazily opened connections to ``path``, one per (process, thread)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: str = "FULL") -> None:
        if str(path) == ":memory:" or not str(path):
            msg = "an SQLite state needs a file path (':memory:' is private to one connection)"
            raise ValueError(msg)
        if synchronous not in SYNCHRONOUS:
            msg = f"synchronous must be one of {sorted(SYNCHRONOUS)}, not {synchronous!r}"
            raise ValueError(msg)
        self.path, self.busy_timeout_s, self.synchronous = str(path), busy_timeout_s, synchronous
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def get(self) -> sqlite3.Connection:
        """This thread's connection (opened on first use, and again after a fork)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)  # a fresh data volume holds no folders yet
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                                   check_same_thread=False)  # used by one thread; closed by any
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            self._local.conn, self._local.pid = conn, os.getpid()
            with self._lock:
                self._all.append(conn)
        return conn

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database's write lock from its first statement."""
        conn = self.get()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        """Close every connection this object opened in this process."""
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
        self._local = threading.local()


def quote(name: str) -> str:
    """A validated identifier, quoted so that SQL keywords (``group``, ``order``) are plain names."""
    return f'"{name}"'
