"""CassandraTableReader: typed rows of a state table, through the shared session and its retries.

Reads run at the settings' consistency (the session's profile). Cassandra has no ORDER BY across
partitions (every key is its own partition, or its shard's), so :meth:`CassandraTableReader.top` scans the whole
table page by page and keeps the N largest rows in memory: its cost grows with the table, and it
reports progress per page.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from typing import Any

from states.cassandra.retry import Decision, backoff_s, decide
from states.cassandra.schema import TableShape, check_cql_identifier, shards_in_use
from states.cassandra.session import CassandraClient, shared_client
from states.cassandra.settings import CassandraSettings
from states.cassandra.shards import sharded
from states.layout import RowLayout
from states.metrics import STATE_METRICS, StateMetrics
from states.reader import Progress, Row, is_deleted, visible_columns
from states.spec import MapSpec

PAGE_SIZE = 1000


class CassandraTableReader:
    """Reads ``<keyspace>.<table>`` the way :class:`~states.cassandra.CassandraBackingMap` wrote it."""

    def __init__(self, settings: CassandraSettings, *, client: CassandraClient | None = None,
                 metrics: StateMetrics = STATE_METRICS, page_size: int = PAGE_SIZE) -> None:
        self.settings, self.metrics, self.page_size = settings, metrics, page_size
        self.client = client or shared_client(settings)
        self.keyspace = check_cql_identifier(settings.keyspace, "keyspace name")

    def column_types(self, table: str) -> dict[str, str]:
        check_cql_identifier(table, "table name")
        stmt = self.client.prepare("SELECT column_name, type FROM system_schema.columns "
                                   "WHERE keyspace_name = ? AND table_name = ?", idempotent=True)
        rows = self.client.run_one(stmt, (self.keyspace, table), kind="schema", metrics=self.metrics)
        return {r["column_name"]: "text" if r["type"] == "varchar" else r["type"] for r in rows}

    def get(self, spec: MapSpec, keys: Sequence[tuple[Any, ...]]) -> list[Row | None]:
        cols = visible_columns(spec)
        layout = RowLayout(spec)
        shards = shards_in_use(self.client, self.keyspace, spec.table, self.settings.shards, self.metrics)
        shape = TableShape.of(self.keyspace, layout, shards)  # the shard first when sharded
        where = " AND ".join(f"{n} = ?" for n in shape.key_columns)
        stmt = self.client.prepare(f"SELECT {', '.join(n for n, _ in cols)} FROM {shape.name} WHERE {where}",
                                   idempotent=True)
        encoded = [layout.key_row(k) for k in keys]
        unique = list(dict.fromkeys(encoded))
        bound = [sharded(k, shape.shards) for k in unique]
        results = self.client.run([(stmt, k) for k in bound], kind="read", metrics=self.metrics)
        found = {}
        for k, rs in zip(unique, results, strict=True):
            if isinstance(rs, BaseException):
                raise rs
            row = rs.one()
            got = None if row is None else {n: row[n] for n, _ in cols}
            found[k] = None if got is None or is_deleted(spec, got) else got  # a tombstone's row: absent
        return [found[k] for k in encoded]

    def top(self, spec: MapSpec, n: int, by: str, progress: Progress | None = None) -> list[Row]:
        """Scan every page, keep the top ``n`` by ``by`` in a heap (no ORDER BY across partitions)."""
        cols = visible_columns(spec)
        if by not in dict(cols):
            msg = f"table {spec.table!r} has no column {by!r} to order by (columns: {[c for c, _ in cols]})"
            raise ValueError(msg)
        stmt = self.client.prepare(f"SELECT {', '.join(c for c, _ in cols)} FROM {self._name(spec)}",
                                   idempotent=True)
        heap: list[tuple[tuple[bool, Any], int, Row]] = []
        scanned, paging_state = 0, None
        bound = stmt.bind(())
        bound.fetch_size = self.page_size
        while True:
            rs = self._page(bound, paging_state)
            for r in rs.current_rows:
                row = {c: r[c] for c, _ in cols}
                if row.get("txid", 0) is None or is_deleted(spec, row):
                    continue  # a row without a stored value (never the case for rows the map wrote)
                item = ((True, row[by]) if row[by] is not None else (False, 0), scanned, row)
                if len(heap) < n:
                    heapq.heappush(heap, item)
                elif item[0] > heap[0][0]:
                    heapq.heapreplace(heap, item)
                scanned += 1
            if progress is not None:
                progress(scanned)
            paging_state = rs.paging_state
            if not paging_state:
                break
        return [row for _, _, row in sorted(heap, key=lambda i: (i[0], -i[1]), reverse=True)]

    def _page(self, bound: Any, paging_state: bytes | None) -> Any:
        """One page of a scan, retried like every read (``states.cassandra.retry`` decides).

        (The client's request loop cannot carry a paging state: the driver takes it as an argument.)
        """
        s = self.settings
        for attempt in range(s.max_retries + 1):
            self.metrics.state_requests.labels(backend="cassandra", kind="read").inc()
            try:
                return self.client.session.execute(bound, paging_state=paging_state)
            except Exception as e:
                if decide(e, lwt=False) is not Decision.RETRY or attempt == s.max_retries:
                    raise
                time.sleep(backoff_s(attempt, s.backoff_initial_s, s.backoff_max_s))
        msg = "unreachable"
        raise AssertionError(msg)

    def truncate(self, tables: Sequence[str]) -> list[str]:
        done = []
        for t in tables:
            check_cql_identifier(t, "table name")
            if self.column_types(t):
                self.metrics.state_requests.labels(backend="cassandra", kind="schema").inc()
                self.client.session.execute(f"TRUNCATE {self.keyspace}.{t}",
                                            timeout=max(self.settings.request_timeout_s, 60.0))
                done.append(t)
        return done

    def _name(self, spec: MapSpec) -> str:
        return f"{self.keyspace}.{check_cql_identifier(spec.table, 'table name')}"
