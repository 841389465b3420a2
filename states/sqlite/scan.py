"""Every key of a state table in an SQLite file (one read-only snapshot), decoded as the backing map decodes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from states.spec import MapSpec, check_identifier
from states.sqlite.backing_map import SQLITE_DECODE, SQLITE_ENCODE
from states.sqlite.connection import quote


def scan_keys(path: str | Path, spec: MapSpec) -> Iterator[tuple[Any, ...]]:
    """The key tuples of ``spec``'s table, in key order."""
    check_identifier(spec.table, "table name")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0, isolation_level=None)
    try:
        names = ", ".join(quote(c.name) for c in spec.key)
        conn.execute("BEGIN")
        for row in conn.execute(f"SELECT {names} FROM {quote(spec.table)} ORDER BY {names}"):
            yield tuple(None if v is None else SQLITE_DECODE[c.type](v) for c, v in zip(spec.key, row, strict=True))
        conn.execute("COMMIT")
    finally:
        conn.close()


def scan_rows(path: str | Path, spec: MapSpec) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every ``(key tuple, stored value)`` of ``spec``'s table in one read (the stored value as the backing map
    decodes it: an ``OpaqueValue`` or ``TransactionalValue``)."""
    from states.layout import RowLayout

    check_identifier(spec.table, "table name")
    layout = RowLayout(spec, SQLITE_ENCODE, SQLITE_DECODE)
    n = len(layout.key_columns)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0, isolation_level=None)
    try:
        conn.execute("BEGIN")
        names = ", ".join(quote(c) for c, _ in layout.columns)
        for row in conn.execute(f"SELECT {names} FROM {quote(spec.table)}"):
            key = tuple(None if v is None else SQLITE_DECODE[c.type](v) for c, v in zip(spec.key, row[:n], strict=True))
            yield key, layout.value_of(tuple(row[n:]))
        conn.execute("COMMIT")
    finally:
        conn.close()
