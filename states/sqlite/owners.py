"""Table claims in a SQLite file: ``trident_table_owners (table_name PRIMARY KEY, topology)``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from states.sqlite.connection import Connections, quote
from states.sqlite.schema import validate_table
from states.tables import OWNERS_TABLE

if TYPE_CHECKING:
    from states.factory import StateFactory


def claim(factory: StateFactory, table: str, topology_id: str) -> str:
    """The owner of ``table`` after claiming it for ``topology_id``: one transaction, the first claim wins."""
    conns = Connections(factory.sqlite_file())
    try:
        with conns.immediate() as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(OWNERS_TABLE)} (table_name text PRIMARY KEY, "
                         f"topology text) WITHOUT ROWID")
            validate_table(conn, OWNERS_TABLE, (("table_name", "text"), ("topology", "text")), ["table_name"])
            conn.execute(f"INSERT OR IGNORE INTO {quote(OWNERS_TABLE)} (table_name, topology) VALUES (?, ?)",
                         (table, topology_id))
            row = conn.execute(f"SELECT topology FROM {quote(OWNERS_TABLE)} WHERE table_name = ?", (table,)).fetchone()
    finally:
        conns.close()
    return str(row[0])
