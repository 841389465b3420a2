"""SqliteTableReader: typed rows of a state table in an SQLite file (read-only, except a recount's truncate)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from states.reader import Progress, Row, is_deleted, visible_columns
from states.spec import DELETED_COLUMN, MapSpec, check_identifier
from states.sqlite.backing_map import SQLITE_DECODE, SQLITE_ENCODE
from states.sqlite.connection import quote

_CHUNK = 500  # keys per SELECT: well under SQLite's bound-parameter limit


class SqliteTableReader:
    """Reads tables the way :class:`~states.sqlite.SqliteBackingMap` wrote them (same types, same keys)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path, self.busy_timeout_s = str(path), busy_timeout_s

    def _connect(self, *, write: bool = False) -> sqlite3.Connection:
        if not Path(self.path).exists():
            msg = f"SQLite state file {self.path} does not exist (nothing committed yet?)"
            raise FileNotFoundError(msg)
        mode = "rw" if write else "ro"
        return sqlite3.connect(f"file:{self.path}?mode={mode}", uri=True, timeout=self.busy_timeout_s,
                               isolation_level=None)

    def column_types(self, table: str) -> dict[str, str]:
        check_identifier(table, "table name")
        if not Path(self.path).exists():
            return {}
        conn = self._connect()
        try:
            return {n: t.lower() for n, t in conn.execute("SELECT name, type FROM pragma_table_info(?)", (table,))}
        finally:
            conn.close()

    def get(self, spec: MapSpec, keys: Sequence[tuple[Any, ...]]) -> list[Row | None]:
        cols = visible_columns(spec)
        key_names = [c.name for c in spec.key]
        encoded = [tuple(SQLITE_ENCODE[c.type](v) for c, v in zip(spec.key, k, strict=True)) for k in keys]
        found: dict[tuple[Any, ...], Row] = {}
        conn = self._connect()
        try:
            conn.execute("BEGIN")  # one snapshot for every chunk
            unique = list(dict.fromkeys(encoded))
            marks = "(" + ", ".join("?" * len(key_names)) + ")"
            key_list = ", ".join(quote(n) for n in key_names)
            for i in range(0, len(unique), _CHUNK):
                chunk = unique[i:i + _CHUNK]
                sql = (f"SELECT {', '.join(quote(n) for n, _ in cols)} FROM {quote(spec.table)} "
                       f"WHERE ({key_list}) IN (VALUES {', '.join([marks] * len(chunk))})")
                for r in conn.execute(sql, [p for k in chunk for p in k]):
                    found[tuple(r[:len(key_names)])] = _row(cols, r)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return [None if r is None or is_deleted(spec, r) else r for r in (found.get(k) for k in encoded)]

    def top(self, spec: MapSpec, n: int, by: str, progress: Progress | None = None) -> list[Row]:
        cols = visible_columns(spec)
        if by not in dict(cols):
            msg = f"table {spec.table!r} has no column {by!r} to order by (columns: {[c for c, _ in cols]})"
            raise ValueError(msg)
        conn = self._connect()
        try:
            rows = [_row(cols, r) for r in conn.execute(
                f"SELECT {', '.join(quote(c) for c, _ in cols)} FROM {quote(spec.table)} "
                f"{_live(spec)}ORDER BY {quote(by)} IS NULL, {quote(by)} DESC LIMIT ?", (n,))]
        finally:
            conn.close()
        if progress is not None:
            progress(len(rows))
        return rows

    def truncate(self, tables: Sequence[str]) -> list[str]:
        done = []
        conn = self._connect(write=True)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for t in tables:
                check_identifier(t, "table name")
                if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)).fetchone():
                    conn.execute(f"DELETE FROM {quote(t)}")
                    done.append(t)
            conn.execute("COMMIT")
        finally:
            conn.close()
        return done


def _live(spec: MapSpec) -> str:
    """The WHERE clause leaving out keys deleted by a tombstone (empty when tombstones are not kept)."""
    return f"WHERE {quote(DELETED_COLUMN)} IS NOT 1 " if spec.tombstones else ""


def _row(cols: list[tuple[str, str]], r: Sequence[Any]) -> Row:
    return {n: None if v is None else SQLITE_DECODE[t](v) for (n, t), v in zip(cols, r, strict=True)}
