"""SqliteBackingMap: the embedded durable backing map, one typed table per map state."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from states.errors import StateTableMissingError
from states.layout import Convert, Row, RowLayout
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import CasResult
from states.spec import MapSpec
from states.sqlite.connection import Connections, quote
from states.sqlite.schema import ensure_table, table_exists

_CHUNK = 500  # keys per SELECT: well under SQLite's bound-parameter limit

SQLITE_ENCODE: Mapping[str, Convert] = {
    "text": str, "bigint": int, "int": int, "double": float, "boolean": int, "blob": bytes,
    "timestamp": datetime.isoformat,  # readable in the sqlite3 shell; round-trips tz-aware values
}
SQLITE_DECODE: Mapping[str, Convert] = {**SQLITE_ENCODE, "boolean": bool, "timestamp": datetime.fromisoformat}


class SqliteBackingMap:
    """Stored values of one :class:`MapSpec` in an SQLite file, with compare-and-set.

    The table has the spec's typed key columns (the primary key), ``txid`` and the value columns
    (and ``prev_<value>`` for opaque state), like the Cassandra table. ``multi_cas`` runs in one
    ``BEGIN IMMEDIATE`` transaction: safe against other threads and processes on the machine.
    Pickles as its path and spec (an executor reopens the file); metrics fall back to the default.
    The table is created if absent only with ``create`` (nothing committed into it yet); otherwise a
    missing table, at the open or later, is :class:`~states.errors.StateTableMissingError`.
    """

    def __init__(self, path: str | Path, spec: MapSpec, *, busy_timeout_s: float = 30.0,
                 synchronous: str = "FULL", metrics: StateMetrics = STATE_METRICS, create: bool = True,
                 committed_txid: int = 0) -> None:
        if spec.ttl_s is not None:
            msg = f"table {spec.table}: ttl_s needs the cassandra backend (SQLite rows do not expire)"
            raise ValueError(msg)
        self.path, self.spec, self.metrics = str(path), spec, metrics
        self._conns = Connections(path, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self._layout = RowLayout(spec, SQLITE_ENCODE, SQLITE_DECODE)
        table = quote(spec.table)
        names = [quote(n) for n, _ in self._layout.columns]
        keys = [quote(n) for n, _ in self._layout.key_columns]
        stored = [quote(n) for n, _ in self._layout.stored_columns]
        self._select = f"SELECT {', '.join(names)} FROM {table} WHERE ({', '.join(keys)}) IN (VALUES {{rows}})"
        self._row_params = "(" + ", ".join("?" * len(keys)) + ")"
        self._upsert = (f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
                        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET "
                        + ", ".join(f"{c} = excluded.{c}" for c in stored))
        self.create, self.committed_txid = create, committed_txid
        with self._conns.immediate() as conn:
            ensure_table(conn, self._layout, create=create, committed_txid=committed_txid)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "spec": self.spec, "busy_timeout_s": self._conns.busy_timeout_s,
                "synchronous": self._conns.synchronous, "create": self.create, "committed_txid": self.committed_txid}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickling re-runs __init__ so connections are reopened here (mypy flags calls of __init__ on an instance).
        self.__init__(state.pop("path"), state.pop("spec"), **state)  # type: ignore[misc]

    def close(self) -> None:
        self._conns.close()

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        key_rows = [self._layout.key_row(k) for k in keys]
        self._count("read")
        conn = self._conns.get()
        conn.execute("BEGIN")  # one snapshot for every chunk
        try:
            with self._table_there():
                found = self._read(conn, key_rows)
        finally:
            conn.execute("COMMIT")
        return [self._layout.value_of(found.get(kr)) for kr in key_rows]

    def multi_put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        rows = [self._row(k, v) for k, v in zip(keys, values, strict=True)]
        self._count("write")
        with self._table_there(), self._conns.immediate() as conn:
            conn.executemany(self._upsert, rows)

    def multi_cas(self, keys: Sequence[Hashable], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        """Write each value only if the stored row still encodes ``expected``, all in one transaction."""
        key_rows = [self._layout.key_row(k) for k in keys]
        results: list[CasResult[Any]] = []
        writes: list[Row] = []
        self._count("cas")
        with self._table_there(), self._conns.immediate() as conn:
            current = self._read(conn, key_rows)
            for kr, e, v in zip(key_rows, expected, values, strict=True):
                now = current.get(kr)
                if now != self._layout.value_row(e):
                    results.append(CasResult(False, self._layout.value_of(now)))
                    continue
                row = self._row(kr, v, encoded_key=True)
                writes.append(row)
                current[kr] = row[len(kr):]  # a repeated key in the same call sees this write
                results.append(CasResult(True))
            conn.executemany(self._upsert, writes)
        return results

    @contextmanager
    def _table_there(self) -> Iterator[None]:
        """Raise :class:`StateTableMissingError` for an error met because the table is gone (dropped while open):
        told by asking the file, never by the error's text."""
        try:
            yield
        except sqlite3.OperationalError as e:
            if table_exists(self._conns.get(), self.spec.table):
                raise
            raise StateTableMissingError(self.spec.table) from e

    def _read(self, conn: sqlite3.Connection, key_rows: list[Row]) -> dict[Row, Row]:
        n = len(self._layout.key_columns)
        found: dict[Row, Row] = {}
        unique = list(dict.fromkeys(key_rows))
        for i in range(0, len(unique), _CHUNK):
            chunk = unique[i:i + _CHUNK]
            sql = self._select.format(rows=", ".join([self._row_params] * len(chunk)))
            for r in conn.execute(sql, [p for kr in chunk for p in kr]):
                found[tuple(r[:n])] = tuple(r[n:])
        return found

    def _row(self, key: Hashable, value: Any, *, encoded_key: bool = False) -> Row:
        """The table row of ``key`` (already a key row when ``encoded_key``) and stored ``value``."""
        stored = self._layout.value_row(value)
        if stored is None:
            msg = f"table {self.spec.table}: cannot store None (a None value reads as absent)"
            raise ValueError(msg)
        key_row = key if encoded_key and isinstance(key, tuple) else self._layout.key_row(key)
        return key_row + stored

    def _count(self, kind: str) -> None:
        self.metrics.state_requests.labels(backend="sqlite", kind=kind).inc()
