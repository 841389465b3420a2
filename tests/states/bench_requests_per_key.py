"""Cassandra requests per updated key, measured on the CQL test server's request counters.

    python -m tests.states.bench_requests_per_key [--keys 500] [--batches 5]

For opaque and transactional maps over ``CassandraBackingMap``, each scenario commits batches that
update every key once and divides the requests the server received (application requests only:
no driver metadata, no PREPARE after warm-up) by the keys updated:

* new keys:        first batch on an empty table (a read of a 64-key sample, then blind
                   INSERT IF NOT EXISTS);
* warm cache:      steady state under CasCachedMap (the LWT only);
* cold cache:      a fresh CasCachedMap over existing rows, e.g. the first batch after a restart;
* no cache:        steady state without a cache (read + LWT);
* stale cache:     warm cache, but another writer changed every row since (failed LWT + LWT).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap, TransactionalMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.cqlserver import CqlServer

MAPS: dict[str, tuple[StateKind, Callable[..., Any]]] = {
    "opaque": (StateKind.OPAQUE, OpaqueMap),
    "transactional": (StateKind.TRANSACTIONAL, TransactionalMap),
}


class Scenario:
    """One map kind on its own table, with a clock of txids and the server's counters."""

    def __init__(self, server: CqlServer, client: CassandraClient, kind: str, keys: int) -> None:
        state_kind, self._wrap = MAPS[kind]
        self.server, self.keys = server, [(f"w{i}",) for i in range(keys)]
        self.spec = MapSpec(f"bench_{kind}", state_kind, (Column("word", "text"),), (Column("count", "bigint"),))
        self.client, self.txid = client, 0

    def state(self, cached: bool) -> Any:
        m = StateMetrics(CollectorRegistry())
        backing: Any = CassandraBackingMap(self.client.settings, self.spec, client=self.client, metrics=m)
        return self._wrap(CasCachedMap(backing, size=len(self.keys)) if cached else backing, metrics=m)

    def run(self, state: Any, batches: int) -> tuple[float, float, float, float]:
        """(requests, reads, LWTs) per updated key and milliseconds per batch over ``batches`` batches."""
        self.server.reset_counts()
        start = time.perf_counter()
        for _ in range(batches):
            self.txid += 1
            state.begin_commit(self.txid)
            state.multi_update(self.keys, [combine_updater(Count(), 1)] * len(self.keys))
            state.commit(self.txid)
        elapsed = time.perf_counter() - start
        stats, n = self.server.stats(), len(self.keys) * batches
        return (self.server.request_count() / n, stats.ops(self.spec.table, "read") / n,
                stats.ops(self.spec.table, "cas") / n, 1000 * elapsed / batches)


def measure(server: CqlServer, client: CassandraClient, kind: str, keys: int, batches: int) -> list[tuple]:
    s = Scenario(server, client, kind, keys)
    warm, rows = s.state(cached=True), []
    rows.append((kind, "new keys", *s.run(warm, 1)))
    rows.append((kind, "warm cache", *s.run(warm, batches)))
    rows.append((kind, "cold cache", *s.run(s.state(cached=True), 1)))
    rows.append((kind, "no cache", *s.run(s.state(cached=False), batches)))
    other = s.state(cached=False)
    s.run(other, 1)  # another writer moves every row on behind the warm cache's back
    rows.append((kind, "stale cache", *s.run(warm, 1)))
    return rows


def main(argv: list[str] | None = None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--batches", type=int, default=5)
    args = parser.parse_args(argv)
    rows: list[tuple] = []
    with CqlServer() as server:
        settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="bench",
                                     local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                     shards=0)  # requests per key: the layout of one LWT per key
        client = CassandraClient(settings)
        try:
            for kind in MAPS:
                rows += measure(server, client, kind, args.keys, args.batches)
        finally:
            client.close()
    print(f"Cassandra requests per updated key ({args.keys} keys, {args.batches} steady-state batches, "
          f"CQL test server)")
    print(f"{'map':<14} {'scenario':<12} {'requests/key':>12} {'reads/key':>10} {'LWTs/key':>9} {'ms/batch':>9}")
    for kind, name, total, reads, lwts, ms in rows:
        print(f"{kind:<14} {name:<12} {total:>12.2f} {reads:>10.2f} {lwts:>9.2f} {ms:>9.1f}")
    return rows


if __name__ == "__main__":
    main()
