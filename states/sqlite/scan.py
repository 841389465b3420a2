"""Every key of a state table in an SQLite file (one read-only snapshot), decoded as the backing map decodes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from states.spec import MapSpec, check_identifier
from states.sqlite.backing_map import SQLITE_DECODE
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
