"""``python -m tests.bench.key_index``: what the key index of a sharded table costs a commit.

    CASSANDRA_CONTACT_POINTS=HOST CASSANDRA_PORT=PORT python -m tests.bench.key_index [--keys 5000] [--shards 16]
        [--commits 10]

Two sharded tables made by the product (``OpaqueMap(CasCachedMap(CassandraBackingMap))``, opaque counts), one
with the storage-attached index on its key column that Cassandra 5.0 gets (``states.cassandra.key_index``), the
other with that index dropped. Their commits alternate, txid by txid, so both see the same load on the server:
each txid adds 1 to ``--keys`` existing keys (the warm steady state) and writes ``--keys`` new ones. Prints the
median time of a commit of each table and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from tests.peers import replication_from_env


def tables(keys: int, shards: int, keyspace: str) -> dict[str, Callable[[int], None]]:
    """Commit functions of txid ``t`` (from 2) for the indexed table and the one without index."""
    from states import CasCachedMap, Count, OpaqueMap
    from states.aggregators import combine_updater
    from states.cassandra import CassandraBackingMap, CassandraSettings
    from states.cassandra.key_index import index_name
    from states.spec import Column, MapSpec, StateKind

    settings = CassandraSettings(contact_points=tuple(os.environ.get("CASSANDRA_CONTACT_POINTS", "127.0.0.1").split(",")),
                                 port=int(os.environ.get("CASSANDRA_PORT", "9042")), keyspace=keyspace,
                                 replication=replication_from_env(), shards=shards)
    out: dict[str, Callable[[int], None]] = {}
    for name in ("with the key index", "without"):
        table = "indexed" if name != "without" else "bare"
        spec = MapSpec(table, StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
        backing = CassandraBackingMap(replace(settings), spec)
        if name == "without":
            backing.client.session.execute(f"DROP INDEX {keyspace}.{index_name(table, 'word')}", timeout=60)
        state = OpaqueMap(CasCachedMap(backing))

        def commit(txid: int, state: OpaqueMap = state) -> None:
            rows = [(f"w{i}",) for i in range(keys)] + [(f"t{txid}_{i}",) for i in range(keys)]
            state.begin_commit(txid)
            state.multi_update(rows, [combine_updater(Count(), 1)] * len(rows))
            state.commit(txid)

        commit(1)
        out[name] = commit
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--commits", type=int, default=10)
    args = parser.parse_args(argv)
    from states.cassandra import CassandraSettings
    from states.cassandra.session import shared_client

    keyspace = f"keyindex_{uuid.uuid4().hex[:8]}"
    ways = tables(args.keys, args.shards, keyspace)
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for txid in range(2, args.commits + 2):
            for name, commit in (ways.items() if txid % 2 else reversed(ways.items())):
                start = time.perf_counter()
                commit(txid)
                times[name].append(time.perf_counter() - start)
    finally:
        client = shared_client(CassandraSettings(
            contact_points=tuple(os.environ.get("CASSANDRA_CONTACT_POINTS", "127.0.0.1").split(",")),
            port=int(os.environ.get("CASSANDRA_PORT", "9042")), keyspace=keyspace))
        client.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)
    medians = {name: statistics.median(xs) for name, xs in times.items()}
    print(f"| {2 * args.keys:,} keys a commit ({args.keys:,} updated, {args.keys:,} new), {args.shards} shards "
          f"| median s a commit | keys/s |\n|---|---|---|")
    for name, m in medians.items():
        print(f"| {name} | {m:.3f} | {2 * args.keys / m:,.0f} |")
    ratio = medians["with the key index"] / medians["without"]
    print(f"(medians of {args.commits} commits each, alternating; the index's commit time x{ratio:.2f})")
    return medians


if __name__ == "__main__":
    main()
