"""``python -m tests.bench servercost``: the Cassandra server's CPU per 1,000 keys written six ways.

    CASSANDRA_CONTACT_POINTS=HOST[,HOST...] CASSANDRA_PORT=PORT python -m tests.bench servercost [--keys 1000] [--repeat 5]

Why a commit of lightweight transactions costs what it does next to Structured Streaming's counters:
the same keys written by the bare driver as one LWT per key (the opaque commit's compare-and-set),
counter updates (the peer's sink), plain writes, and conditional batches confined to one partition
each (keys bucketed into ``--buckets`` partitions: one Paxos round per batch); then the product's own
commit of the same keys (``OpaqueMap(CasCachedMap(CassandraBackingMap))``, warm cache, one txid per round)
into a table of a partition per key and into one of ``--buckets`` shards (``cassandra.shards``), with
the CPU of this process (the commit's Python and the driver's threads) beside. The server's CPU is read
from ``/proc`` of its process (``CassandraDaemon`` on this machine), its idle CPU subtracted; so it needs
a Cassandra started on the same machine (every ``CassandraDaemon`` on it: all the nodes of a replicated cluster
on loopback, whose keyspaces get ``CASSANDRA_REPLICATION_FACTOR`` replicas). Each row is also given per key and as
a ratio to the bare driver's LWT per key (time and server CPU), the ceiling the product's commit is held to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.peers import replication_from_env


def contact_points() -> tuple[str, ...]:
    """``CASSANDRA_CONTACT_POINTS`` (comma separated hosts), else 127.0.0.1."""
    return tuple(h.strip() for h in os.environ.get("CASSANDRA_CONTACT_POINTS", "127.0.0.1").split(",") if h.strip())


BARE_LWT = "lightweight transactions, one per key"  # the bare driver's: the ceiling the product's commit is held to
SETTLE_S = 1.0  # after each round: the server's asynchronous work (Paxos commits, memtable) lands in it


def server_cpu_s() -> float:
    """CPU seconds (user + system) of the Cassandra processes on this machine."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = subprocess.run(["pgrep", "-f", "CassandraDaemon"], capture_output=True, text=True, check=False)
    total = 0.0
    for pid in pids.stdout.split():
        fields = (Path("/proc") / pid / "stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    if not total:
        msg = "no CassandraDaemon process on this machine: the server's CPU cannot be read"
        raise RuntimeError(msg)
    return total


def styles(session: Any, ks: str, keys: list[str], buckets: int) -> dict[str, Callable[[int], None]]:
    """Round ``r``'s writes of every key, by style (each round's condition holds: it names round r - 1)."""
    from cassandra.concurrent import execute_concurrent_with_args
    from cassandra.query import BatchStatement, BatchType

    for table, columns in (("lwt", "k text PRIMARY KEY, v bigint, txid bigint"), ("cnt", "k text PRIMARY KEY, n counter"),
                           ("plain", "k text PRIMARY KEY, v bigint, txid bigint"),
                           ("part", "b int, k text, v bigint, txid bigint, PRIMARY KEY (b, k)")):
        session.execute(f"CREATE TABLE {ks}.{table} ({columns})")
    insert = session.prepare(f"INSERT INTO {ks}.lwt (k, v, txid) VALUES (?, 0, 0)")
    execute_concurrent_with_args(session, insert, [(k,) for k in keys], concurrency=64)
    insert = session.prepare(f"INSERT INTO {ks}.part (b, k, v, txid) VALUES (?, ?, 0, 0)")
    execute_concurrent_with_args(session, insert, [(i % buckets, k) for i, k in enumerate(keys)], concurrency=64)
    lwt = session.prepare(f"UPDATE {ks}.lwt SET v = ?, txid = ? WHERE k = ? IF txid = ?")
    counter = session.prepare(f"UPDATE {ks}.cnt SET n = n + ? WHERE k = ?")
    plain = session.prepare(f"UPDATE {ks}.plain SET v = ?, txid = ? WHERE k = ?")
    bucketed = session.prepare(f"UPDATE {ks}.part SET v = ?, txid = ? WHERE b = ? AND k = ? IF txid = ?")

    def each_lwt(r: int) -> None:
        done = execute_concurrent_with_args(session, lwt, [(r, r, k, r - 1) for k in keys], concurrency=64)
        if not all(d.success and d.result_or_exc.one()[0] for d in done):
            msg = f"round {r}: a lightweight transaction did not apply"
            raise RuntimeError(msg)

    def batches(r: int) -> None:
        futures = []
        for b in range(buckets):
            batch = BatchStatement(batch_type=BatchType.UNLOGGED)
            for k in keys[b::buckets]:
                batch.add(bucketed, (r, r, b, k, r - 1))
            futures.append(session.execute_async(batch))
        if not all(f.result().one()[0] for f in futures):
            msg = f"round {r}: a conditional batch did not apply"
            raise RuntimeError(msg)

    return {
        BARE_LWT: each_lwt,
        "counter updates (128 in flight)": lambda r: execute_concurrent_with_args(
            session, counter, [(1, k) for k in keys], concurrency=128, raise_on_first_error=True),
        "plain writes": lambda r: execute_concurrent_with_args(
            session, plain, [(r, r, k) for k in keys], concurrency=64, raise_on_first_error=True),
        f"conditional batches, one per partition ({buckets})": batches,
    }


def product_styles(keys: list[str], shards: int, keyspaces: list[str]) -> dict[str, Callable[[int], None]]:
    """Round ``r`` as the product commits it: txid ``r + 1`` adds 1 to every key, after a first txid that
    created them (so the cache is warm, as in a steady stream), per key and sharded; each in a keyspace of its
    own, added to ``keyspaces``."""
    from dataclasses import replace

    from states import CasCachedMap, Count, OpaqueMap
    from states.aggregators import combine_updater
    from states.cassandra import CassandraBackingMap, CassandraSettings
    from states.spec import Column, MapSpec, StateKind

    spec = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
    base = CassandraSettings(contact_points=contact_points(), port=int(os.environ.get("CASSANDRA_PORT", "9042")),
                             keyspace="servercost", replication=replication_from_env(),
                             local_dc=os.environ.get("CASSANDRA_LOCAL_DC"))
    rows = [(k,) for k in keys]
    out: dict[str, Callable[[int], None]] = {}
    for n, name in ((0, "the product's commit, a partition per key"), (shards, f"the product's commit, {shards} shards")):
        keyspaces.append(f"servercost_{uuid.uuid4().hex[:8]}")
        state = OpaqueMap(CasCachedMap(CassandraBackingMap(replace(base, keyspace=keyspaces[-1], shards=n), spec)))

        def commit(r: int, state: OpaqueMap = state) -> None:
            """Txid ``r + 1``: round 0 creates the keys."""
            state.begin_commit(r + 1)
            state.multi_update(rows, [combine_updater(Count(), 1)] * len(rows))
            state.commit(r + 1)

        commit(0)
        out[name] = commit
    return out


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    from cassandra.cluster import Cluster

    from states.cassandra.schema import replication_cql

    cluster = Cluster(list(contact_points()), port=int(os.environ.get("CASSANDRA_PORT", "9042")), protocol_version=4)
    session = cluster.connect()
    session.default_timeout = 60
    ks = f"servercost_{uuid.uuid4().hex[:8]}"
    session.execute(f"CREATE KEYSPACE {ks} WITH replication = {replication_cql(replication_from_env())}")
    keys, keyspaces = [f"w{i}" for i in range(args.keys)], [ks]
    try:
        ways = styles(session, ks, keys, args.buckets) | product_styles(keys, args.buckets, keyspaces)
        rounds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in ways}
        for r in range(1, args.repeat + 1):
            for name, write in ways.items():
                cpu, client, start = server_cpu_s(), time.process_time(), time.perf_counter()
                write(r)
                wall, client = time.perf_counter() - start, time.process_time() - client
                time.sleep(SETTLE_S)
                rounds[name].append((server_cpu_s() - cpu, wall, client))
        cpu = server_cpu_s()
        time.sleep(3 * SETTLE_S)
        idle = (server_cpu_s() - cpu) / (3 * SETTLE_S)
    finally:
        for name in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=60)
        cluster.shutdown()
    out = {}
    print(f"| {args.keys:,} keys as | server CPU-s | wall s (the writes) | client CPU-s |\n|---|---|---|---|")
    for name, xs in rounds.items():
        wall = statistics.median(w for _, w, _ in xs)
        cpu_s = statistics.median(c for c, _, _ in xs) - idle * (SETTLE_S + wall)
        out[name] = (cpu_s, wall)
        print(f"| {name} | {cpu_s:.3f} | {wall:.3f} | {statistics.median(c for _, _, c in xs):.3f} |")
    print(f"(medians of {args.repeat}; the server's idle CPU, {idle:.3f} CPU-s per second, subtracted; keyspaces "
          f"{dict(replication_from_env())})")
    bare_cpu, bare_wall = out[BARE_LWT]
    print("| per key | ms (the writes) | server CPU-ms | x the bare LWT's time | x its server CPU |\n|---|---|---|---|---|")
    for name, (cpu_s, wall) in out.items():
        print(f"| {name} | {1000 * wall / args.keys:.3f} | {1000 * cpu_s / args.keys:.3f} | {wall / bare_wall:.2f} | "
              f"{cpu_s / bare_cpu:.2f} |")
    return out


if __name__ == "__main__":
    main()
