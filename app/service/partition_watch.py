"""The largest partition of each sharded state table of a pipeline, refreshed by a thread of its own.

A sharded table's partitions grow with the key space and nothing in the commit path would notice one
passing Cassandra's guidance (about 100 MB). Every :data:`INTERVAL_S`, while this process holds the
pipeline's lease (a standby asks nothing), the watch reads each sharded table's largest partition in
bytes from every node and counts one shard's rows (:mod:`states.cassandra.partition_size`), and sets
``trident_state_partition_max_bytes`` and ``trident_state_partition_max_rows`` labelled by pipeline and
table. Off the commit path: a failed reading is logged and tried again at the next refresh.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from app.metrics import Metrics
from app.service.watch import Watch
from states.cassandra.partition_size import ShardCounts, ShardedTable, server_largest_bytes
from states.cassandra.session import CassandraClient
from states.factory import StateFactory

log = logging.getLogger(__name__)

INTERVAL_S = 300.0  # the server's figure changes at flushes and compactions; a shard's count reads all its rows


def sharded_tables(sinks: Iterable[tuple[StateFactory, str]]) -> list[ShardedTable]:
    """The sharded Cassandra tables among ``(factory, table)`` sinks; a partition per key, SQLite or memory: none."""
    out = []
    for factory, table in sinks:
        if factory.cassandra is not None and (shards := factory.shards_of(table)):
            out.append(ShardedTable(factory.cassandra.keyspace, table, shards))
    return out


class PartitionWatch(Watch):
    """Refreshes the partition-size gauges of one pipeline's sharded tables; ``active``: while the lease is held."""

    def __init__(self, pipeline: str, tables: list[ShardedTable], client: Callable[[], CassandraClient],
                 metrics: Metrics, *, active: Callable[[], bool] = lambda: True,
                 interval_s: float = INTERVAL_S) -> None:
        super().__init__(f"partition-watch-{pipeline}", interval_s)
        self.pipeline, self.metrics = pipeline, metrics
        self._client, self._is_active = client, active
        self.counts = [ShardCounts(t) for t in tables]

    def look(self) -> None:
        self.refresh()

    def active(self) -> bool:
        return self._is_active()

    def refresh(self) -> None:
        """Read every table once: the bytes from every node, the rows of its next shard; set the gauges."""
        client = self._client()
        for counts in self.counts:
            table = counts.table
            size = server_largest_bytes(client, table)
            if size is not None:
                self.metrics.partition_max_bytes.labels(self.pipeline, table.name).set(size)
            counts.count_next(client)
            if counts.largest is not None:
                self.metrics.partition_max_rows.labels(self.pipeline, table.name).set(counts.largest)

    def failed(self, error: Exception) -> None:
        log.info("pipeline %s: the partition sizes could not be read (again in %.0f s): %s", self.pipeline,
                 self.interval_s, error)
