"""A state table copied into another layout (a partition per key, or N shards), row for row, resumably.

Every row keeps its stored columns exactly (``txid``, the values, ``prev_*``): a txid frozen but not
committed when the copy ran still replays exactly on the copy (the opaque rule needs ``prev`` and
``txid``). Each row is written with the write time of the source row (``USING TIMESTAMP``), and with
its remaining time to live, so the copy's cells are as old as the originals: a later commit (a Paxos
write stamped by the server's clock) always supersedes them, whatever the clock of the copying
machine. Writes are idempotent inserts (in unlogged batches): copying a row twice leaves one row. A null column is left
unset (the new table is fresh: no cell reads as null, and costs no tombstone).

The source is read in token order, and :meth:`TableCopy.copy` reports after each page the last token
whose partitions are wholly written: a copy resumed from there loses no row (a partition cut by a kill
is copied again from its start) and duplicates none (the primary key decides).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cassandra.concurrent import execute_concurrent
from cassandra.query import UNSET_VALUE, BatchStatement, BatchType

from states.cassandra.schema import TableShape, check_cql_identifier
from states.cassandra.session import CassandraClient
from states.cassandra.shards import SHARD_COLUMN, sharded
from states.layout import RowLayout
from states.metrics import STATE_METRICS, StateMetrics
from states.spec import MapSpec

#: The table a layout's copy goes to: the table's name without a layout suffix, then ``_s<shards>``.
LAYOUT_SUFFIX = re.compile(r"_s\d+$")
_TIMEOUT_S = 60.0
BATCH_ROWS = 40  # rows of one shard per unlogged batch: about 2-4 KB, under Cassandra's batch size warning (5 KB)
BATCH_PARTITIONS = 10  # keys per batch into a partition per key: Cassandra warns above 10 partitions in a batch


def layout_table(table: str, shards: int) -> str:
    """The name of ``table``'s copy laid out with ``shards`` (0: a partition per key): ``word_counts`` and
    ``word_counts_s16`` both become ``word_counts_s0`` for 0 shards and ``word_counts_s4`` for 4."""
    return check_cql_identifier(f"{LAYOUT_SUFFIX.sub('', table)}_s{shards}", "table name")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A table's row count and an order-free checksum of its rows' key and stored columns."""

    rows: int
    checksum: str


class TableCopy:
    """Copies ``spec``'s table laid out with ``source_shards`` into ``target_table`` laid out with
    ``target_shards``, both in ``keyspace``."""

    def __init__(self, client: CassandraClient, keyspace: str, spec: MapSpec, *, source_shards: int,
                 target_table: str, target_shards: int, metrics: StateMetrics = STATE_METRICS) -> None:
        self.client, self.metrics = client, metrics
        self.source = TableShape.of(keyspace, RowLayout(spec), source_shards)
        self.target = TableShape.of(keyspace, RowLayout(replace(spec, table=target_table)), target_shards)
        self._layout = RowLayout(spec)
        self._key = tuple(n for n, _ in self._layout.key_columns)
        self._stored = tuple(n for n, _ in self._layout.stored_columns)

    def create_target(self) -> None:
        """``CREATE TABLE IF NOT EXISTS`` the target, as the service would create it for its layout."""
        self.metrics.state_requests.labels(backend="cassandra", kind="schema").inc()
        self.client.session.execute(self.target.create_cql(), timeout=_TIMEOUT_S)
        self.client.session.cluster.control_connection.wait_for_schema_agreement()

    def copy(self, after_token: int | None, page_size: int, on_page: Callable[[int | None, int], None]) -> int:
        """Copy every row whose partition token is above ``after_token`` (None: every row); after each page is
        written, ``on_page(done_token, rows)`` with the last token wholly copied and the rows written so far.
        Returns the rows written."""
        timed = self._stored[0]  # every column of a row is written at once: one write time and TTL per row
        pk = ", ".join(self.source.partition_key)
        cols = ", ".join((*self._key, *self._stored))
        cql = f"SELECT token({pk}), {cols}, writetime({timed}), ttl({timed}) FROM {self.source.name}"
        if after_token is not None:
            cql += f" WHERE token({pk}) > ?"
        stmt = self.client.prepare(cql, idempotent=True)
        bound = stmt.bind(() if after_token is None else (after_token,))
        bound.fetch_size = page_size
        insert = self.client.prepare(self._insert_cql(), idempotent=True)
        page: list[tuple[Any, ...]] = []
        written, complete, last = 0, after_token, None
        for row in self.client.session.execute(bound, timeout=_TIMEOUT_S):
            values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
            token = values[0]
            if last is not None and token != last:
                complete = last  # every row of ``last`` is written or in ``page``: it is wholly copied once written
            page.append(self._params(values[1:]))
            last = token
            if len(page) >= page_size:  # a partition larger than a page is written in pages, reported when done
                written += self._write(insert, page)
                page = []
                on_page(complete, written)
        written += self._write(insert, page)
        on_page(last if last is not None else complete, written)
        return written

    def fingerprint(self, shape: TableShape | None = None, page_size: int = 5000) -> Fingerprint:
        """Row count and checksum of ``shape``'s table (the source by default) over its key and stored columns."""
        shape = shape or self.source
        cols = ", ".join((*self._key, *self._stored))
        stmt = self.client.prepare(f"SELECT {cols} FROM {shape.name}", idempotent=True)
        bound = stmt.bind(())
        bound.fetch_size = page_size
        rows, total = 0, 0
        for row in self.client.session.execute(bound, timeout=_TIMEOUT_S):
            values = tuple(row.values()) if isinstance(row, dict) else tuple(row)
            digest = hashlib.blake2b(repr(values).encode(), digest_size=16).digest()
            total = (total + int.from_bytes(digest, "big")) % (1 << 128)
            rows += 1
        return Fingerprint(rows, f"{total:032x}")

    def _insert_cql(self) -> str:
        names = ([SHARD_COLUMN] if self.target.shards else []) + [*self._key, *self._stored]
        marks = ", ".join("?" for _ in names)
        return f"INSERT INTO {self.target.name} ({', '.join(names)}) VALUES ({marks}) USING TIMESTAMP ? AND TTL ?"

    def _params(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        n = len(self._key) + len(self._stored)
        columns, written_at, ttl = values[:n], values[n], values[n + 1]
        key_row = columns[:len(self._key)]
        primary = sharded(key_row, self.target.shards)
        # no write time (the timed column is null: a non-transactional value of nulls): stamped now, as it was
        stored = tuple(UNSET_VALUE if v is None else v for v in columns[len(self._key):])  # a null: no cell, no tombstone
        return (*primary, *stored, UNSET_VALUE if written_at is None else written_at, ttl or 0)

    def _write(self, insert: Any, page: list[tuple[Any, ...]]) -> int:
        """Write ``page``'s rows in unlogged batches: into shards, of one shard's rows (one partition: one
        mutation); into a partition per key, of a few keys (a few partitions: no batch warning). A fraction of
        the requests, and of the client's work, of one insert per row."""
        if not page:
            return 0
        self.metrics.state_requests.labels(backend="cassandra", kind="migrate").inc(len(page))
        groups: dict[Any, list[tuple[Any, ...]]] = {}
        for i, row in enumerate(page):
            groups.setdefault(row[0] if self.target.shards else i // BATCH_PARTITIONS, []).append(row)
        batches = []
        for rows in groups.values():
            for at in range(0, len(rows), BATCH_ROWS):
                batch = BatchStatement(BatchType.UNLOGGED)
                for row in rows[at:at + BATCH_ROWS]:
                    batch.add(insert, row)
                batches.append((batch, None))
        execute_concurrent(self.client.session, batches, concurrency=max(1, self.client.settings.max_concurrency),
                           raise_on_first_error=True)
        return len(page)
