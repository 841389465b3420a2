"""SQLite backends: the embedded durable default (one file, several processes on one machine)."""

from states.sqlite.backing_map import SqliteBackingMap
from states.sqlite.txstate import SqliteTransactionalStateStore

__all__ = ["SqliteBackingMap", "SqliteTransactionalStateStore"]
