"""A storage-attached index on a sharded table's key columns, so plain CQL reads a key without its shard.

A sharded table is keyed ``PRIMARY KEY ((shard), word)``: without help, cqlsh reads a key only by listing
every shard (``WHERE shard IN (0, ..., N-1) AND word = 'the'``). On Cassandra 5.0 the table gets a
storage-attached index (SAI) on each key column when it is created, and
``SELECT word, count FROM ks.word_counts WHERE word = 'the'`` works as on a table of a partition per key.
Cassandra 4.x has no SAI: the index is skipped and the log names the query that works there.

The index is made once, right after the table (``CREATE INDEX IF NOT EXISTS``: idempotent), and never
dropped or altered; what it costs a commit is measured in ``docs/performance.md``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from cassandra import InvalidRequest

from states.cassandra.session import BACKEND, CassandraClient
from states.metrics import StateMetrics

log = logging.getLogger(__name__)

SAI_SINCE = (5, 0)  # the first Cassandra release with storage-attached indexes


def index_name(table: str, column: str) -> str:
    """The index of ``column`` of ``table``: ``<table>_<column>_key`` (unique in its keyspace)."""
    return f"{table}_{column}_key"


def release(versions: Iterable[str | None]) -> tuple[int, int] | None:
    """The oldest ``(major, minor)`` among the nodes' release versions (None when none is known): an index is
    made only when every node has SAI."""
    found = []
    for v in versions:
        parts = (v or "").split("-")[0].split(".")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            found.append((int(parts[0]), int(parts[1])))
    return min(found) if found else None


def plain_query(name: str, shards: int, key_columns: tuple[str, ...]) -> str:
    """The plain-CQL read of one key of a sharded table without an index: every shard listed."""
    where = " AND ".join(f"{c} = ?" for c in key_columns)
    return f"SELECT * FROM {name} WHERE shard IN ({', '.join(map(str, range(shards)))}) AND {where}"


def ensure_key_index(client: CassandraClient, keyspace: str, table: str, shards: int,
                     key_columns: tuple[str, ...], *, metrics: StateMetrics) -> bool:
    """Index each key column of a just-created sharded table on Cassandra 5.0+ (True); on older servers, or
    when the server refuses the index (e.g. a guardrail), log the query that reads a key and return False."""
    name = f"{keyspace}.{table}"
    hosts = client.session.cluster.metadata.all_hosts()
    at = release(h.release_version for h in hosts)
    if at is None or at < SAI_SINCE:
        log.info("table %s: Cassandra %s has no storage-attached index; read a key with: %s", name,
                 ".".join(map(str, at)) if at else "of unknown release", plain_query(name, shards, key_columns))
        return False
    try:
        for column in key_columns:
            metrics.state_requests.labels(backend=BACKEND, kind="schema").inc()
            client.session.execute(f"CREATE INDEX IF NOT EXISTS {index_name(table, column)} ON {name} ({column}) "
                                   f"USING 'sai'", timeout=max(client.settings.request_timeout_s, 30.0))
    except InvalidRequest as e:
        log.warning("table %s: the server refused a storage-attached index (%s); read a key with: %s", name,
                    " ".join(str(e).split())[:200], plain_query(name, shards, key_columns))
        return False
    return True
