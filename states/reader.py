"""Reading a state table for people: typed rows by key and the top N by a column; emptying it for a recount.

Each backend answers for its own schema and reads (``states.sqlite.reader``,
``states.cassandra.reader``); :meth:`states.factory.StateFactory.reader` opens the one of a factory's backend. A row is a dict of the key columns, ``txid`` (when the kind stores
one) and the value columns as readers see them (an opaque state's current value, never ``prev_``,
never a stamped column's ``<name>_at``). A key deleted by a tombstone reads as absent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from states.spec import DELETED_COLUMN, MapSpec, StateKind
from states.stamped import unstamped

Row = dict[str, Any]
Progress = Callable[[int], None]  # rows scanned so far


@runtime_checkable
class TableReader(Protocol):
    """Reads one backend's state tables (and truncates them: the reset of a full recount)."""

    def column_types(self, table: str) -> dict[str, str]:
        """Column name -> type (CQL names) of ``table``; empty when the table does not exist."""
        ...

    def get(self, spec: MapSpec, keys: Sequence[tuple[Any, ...]]) -> list[Row | None]:
        """The rows of ``keys`` (tuples in key-column order), None for a key never written."""
        ...

    def top(self, spec: MapSpec, n: int, by: str, progress: Progress | None = None) -> list[Row]:
        """The ``n`` rows with the largest ``by`` (nulls last), largest first."""
        ...

    def truncate(self, tables: Sequence[str]) -> list[str]:
        """Empty ``tables`` (those that exist); returns the ones emptied."""
        ...


def visible_columns(spec: MapSpec) -> list[tuple[str, str]]:
    """The columns a reader shows, in order: keys, ``txid`` (opaque and transactional), values."""
    txid = [] if spec.kind is StateKind.NON_TRANSACTIONAL else [("txid", "bigint")]
    return [(c.name, c.type) for c in spec.key] + txid + [(c.name, c.type) for c in spec.value]


def is_deleted(spec: MapSpec, row: Row) -> bool:
    """Whether ``row`` is a key a tombstone deleted (kept, with its txid, so replays are recognised)."""
    return spec.tombstones and bool(row.get(DELETED_COLUMN))


def visible_value(spec: MapSpec, value: Any) -> Any:
    """A stored aggregate as readers see it: stamped parts as their values; with tombstones, None for
    a deleted key and the user's aggregates without the flag (a scalar when there is one)."""
    if value is None or not spec.tombstones:
        return unstamped(value)
    *values, flag = value
    if flag is not None and unstamped(flag):
        return None
    return unstamped(values[0]) if len(values) == 1 else unstamped(tuple(values))
