"""In-memory table storage: partitions, clustering rows, cells with TTL, a test clock.

Model (a simplification of Cassandra's): a cell has a value and an optional
expiry; INSERT also writes a row marker (so a row exists with only key columns);
a row is live while its marker or any cell is live; a partition is live while its
static row or any row is live. Writes apply in arrival order (client timestamps
are accepted but do not reorder writes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .schema import Table

try:  # Murmur3 partitioner token, for Cassandra's full-scan order; optional.
    from cassandra.murmur3 import murmur3 as _murmur3
except ImportError:  # pragma: no cover - the driver is always installed in this project
    _murmur3 = None


class Clock:
    """Wall clock plus an offset tests can advance to expire TTLs instantly."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        return time.time() + self._offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds


@dataclass
class Cell:
    value: Any
    expires: float | None = None  # clock seconds; None = no TTL
    written: int = 0  # write timestamp in microseconds (for writetime())
    ttl: int | None = None

    def live(self, now: float) -> bool:
        return self.expires is None or now < self.expires


@dataclass
class Row:
    marker: Cell | None = None
    cells: dict[str, Cell] = field(default_factory=dict)

    def live(self, now: float) -> bool:
        if self.marker is not None and self.marker.live(now):
            return True
        return any(c.live(now) for c in self.cells.values())

    def value(self, column: str, now: float) -> Any:
        cell = self.cells.get(column)
        return cell.value if cell is not None and cell.live(now) else None

    def cell(self, column: str, now: float) -> Cell | None:
        cell = self.cells.get(column)
        return cell if cell is not None and cell.live(now) else None


@dataclass
class Partition:
    static: dict[str, Cell] = field(default_factory=dict)
    rows: dict[tuple[Any, ...], Row] = field(default_factory=dict)

    def static_live(self, now: float) -> bool:
        return any(c.live(now) for c in self.static.values())

    def static_value(self, column: str, now: float) -> Any:
        cell = self.static.get(column)
        return cell.value if cell is not None and cell.live(now) else None

    def live(self, now: float) -> bool:
        return self.static_live(now) or any(r.live(now) for r in self.rows.values())


def serialize_partition_key(table: Table, pk: tuple[Any, ...]) -> bytes:
    """Partition key bytes as Cassandra hashes them (composite: len + bytes + 0x00 each)."""
    columns = table.partition_key
    if len(columns) == 1:
        return columns[0].type.encode(pk[0])
    out = bytearray()
    for col, value in zip(columns, pk, strict=False):
        data = col.type.encode(value)
        out += len(data).to_bytes(2, "big") + data + b"\x00"
    return bytes(out)


def token_of(key: bytes) -> int:
    return _murmur3(key) if _murmur3 is not None else int.from_bytes(key[:8].ljust(8, b"\x00"), "big", signed=True)


class TableData:
    """Rows of one table, keyed by partition-key tuple then clustering tuple."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.partitions: dict[tuple[Any, ...], Partition] = {}
        self._order_keys: dict[tuple[Any, ...], tuple[int, bytes]] = {}

    def get(self, pk: tuple[Any, ...]) -> Partition | None:
        return self.partitions.get(pk)

    def get_or_create(self, pk: tuple[Any, ...]) -> Partition:
        part = self.partitions.get(pk)
        if part is None:
            part = self.partitions[pk] = Partition()
        return part

    def order_key(self, pk: tuple[Any, ...]) -> tuple[int, bytes]:
        """(Murmur3 token, key bytes): the order of partitions in full scans and paging."""
        cached = self._order_keys.get(pk)
        if cached is None:
            key = serialize_partition_key(self.table, pk)
            cached = self._order_keys[pk] = (token_of(key), key)
        return cached

    def partition_keys(self, now: float, keys: list[tuple[Any, ...]] | None = None) -> list[tuple[Any, ...]]:
        """Live partition keys (all, or those among `keys`) in token order."""
        candidates = self.partitions.keys() if keys is None else [k for k in dict.fromkeys(keys) if k in self.partitions]
        live = [k for k in candidates if self.partitions[k].live(now)]
        return sorted(live, key=self.order_key)

    def rows_in_order(self, part: Partition, now: float, reverse: bool = False) -> Iterator[tuple[tuple[Any, ...], Row]]:
        items = [(ck, row) for ck, row in part.rows.items() if row.live(now)]
        items.sort(key=lambda item: self.table.clustering_sort_key(item[0]), reverse=reverse)
        return iter(items)

    def purge(self, pk: tuple[Any, ...], now: float) -> None:
        """Drop expired cells/rows of one partition, and the partition once empty."""
        part = self.partitions.get(pk)
        if part is None:
            return
        part.static = {k: c for k, c in part.static.items() if c.live(now)}
        for ck in [ck for ck, row in part.rows.items() if not row.live(now)]:
            del part.rows[ck]
        for row in part.rows.values():
            row.cells = {k: c for k, c in row.cells.items() if c.live(now)}
            if row.marker is not None and not row.marker.live(now):
                row.marker = None
        if not part.static and not part.rows:
            del self.partitions[pk]

    def truncate(self) -> None:
        self.partitions.clear()
