"""SQLite tables from a row layout: created if absent, validated if present (never altered)."""

from __future__ import annotations

import sqlite3

from states.errors import SchemaMismatchError, StateTableMissingError
from states.layout import RowLayout
from states.spec import check_identifier
from states.sqlite.connection import quote


def ensure_table(conn: sqlite3.Connection, layout: RowLayout, *, create: bool = True, committed_txid: int = 0) -> None:
    """Create ``layout``'s table if absent (``create``); if present, check its columns, types and primary key.

    Without ``create`` (txids were committed into it: ``committed_txid``) a missing table is
    :class:`StateTableMissingError`, never created again empty. Columns are declared with their CQL
    type names (``bigint``, ``double``, ``text``), which SQLite maps to the matching storage
    affinities, so ``.schema`` reads like the Cassandra table.
    """
    table = check_identifier(layout.spec.table, "table name")
    if not create and not table_exists(conn, table):
        raise StateTableMissingError(table, committed_txid)
    cols = ", ".join(f"{quote(n)} {t}" for n, t in layout.columns)
    keys = ", ".join(quote(n) for n, _ in layout.key_columns)
    conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(table)} ({cols}, PRIMARY KEY ({keys})) WITHOUT ROWID")
    validate_table(conn, table, layout.columns, [n for n, _ in layout.key_columns])


def table_exists(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` exists in the file ``conn`` opened."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None


def validate_table(conn: sqlite3.Connection, table: str, columns: tuple[tuple[str, str], ...],
                   primary_key: list[str]) -> None:
    """Raise SchemaMismatchError naming table, column and both types when ``table`` differs."""
    found = {r[1]: (r[2].lower(), r[5]) for r in conn.execute(f"PRAGMA table_info({quote(table)})")}
    for name, type_ in columns:
        if name not in found:
            msg = (
                f"table {table!r} has no column {name!r} (expected type {type_}); "
                f"migrate the table or choose another table name"
            )
            raise SchemaMismatchError(msg)
        if found[name][0] != type_:
            msg = (
                f"table {table!r} column {name!r} has type {found[name][0]}, "
                f"expected {type_}"
            )
            raise SchemaMismatchError(msg)
    pk = [n for n, (_, pos) in sorted(found.items(), key=lambda kv: kv[1][1]) if pos]
    if pk != primary_key:
        msg = f"table {table!r} has primary key {pk}, expected {primary_key}"
        raise SchemaMismatchError(msg)
