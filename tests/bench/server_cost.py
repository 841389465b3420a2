"""``python -m tests.bench servercost``: the Cassandra server's CPU per 1,000 keys written four ways.

    CASSANDRA_CONTACT_POINTS=HOST CASSANDRA_PORT=PORT python -m tests.bench servercost [--keys 1000] [--repeat 5]

Why a commit of lightweight transactions costs what it does next to Structured Streaming's counters:
the same keys written by the bare driver as one LWT per key (the opaque commit's compare-and-set),
counter updates (the peer's sink), plain writes, and conditional batches confined to one partition
each (keys bucketed into ``--buckets`` partitions: one Paxos round per batch). The server's CPU is read
from ``/proc`` of its process (``CassandraDaemon`` on this machine), its idle CPU subtracted; so it needs
a Cassandra started on the same machine.
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
        "lightweight transactions, one per key": each_lwt,
        "counter updates (128 in flight)": lambda r: execute_concurrent_with_args(
            session, counter, [(1, k) for k in keys], concurrency=128, raise_on_first_error=True),
        "plain writes": lambda r: execute_concurrent_with_args(
            session, plain, [(r, r, k) for k in keys], concurrency=64, raise_on_first_error=True),
        f"conditional batches, one per partition ({buckets})": batches,
    }


def main(argv: list[str] | None = None) -> dict[str, tuple[float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--buckets", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    from cassandra.cluster import Cluster

    cluster = Cluster([os.environ.get("CASSANDRA_CONTACT_POINTS", "127.0.0.1")],
                      port=int(os.environ.get("CASSANDRA_PORT", "9042")), protocol_version=4)
    session = cluster.connect()
    ks = f"servercost_{uuid.uuid4().hex[:8]}"
    session.execute(f"CREATE KEYSPACE {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}")
    try:
        ways = styles(session, ks, [f"w{i}" for i in range(args.keys)], args.buckets)
        rounds: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for r in range(1, args.repeat + 1):
            for name, write in ways.items():
                cpu, start = server_cpu_s(), time.perf_counter()
                write(r)
                wall = time.perf_counter() - start
                time.sleep(SETTLE_S)
                rounds[name].append((server_cpu_s() - cpu, wall))
        cpu = server_cpu_s()
        time.sleep(3 * SETTLE_S)
        idle = (server_cpu_s() - cpu) / (3 * SETTLE_S)
    finally:
        session.execute(f"DROP KEYSPACE {ks}")
        cluster.shutdown()
    out = {}
    print(f"| {args.keys:,} keys as | server CPU-s | wall s (the writes) |\n|---|---|---|")
    for name, xs in rounds.items():
        cpu_s = statistics.median(c for c, _ in xs) - idle * (SETTLE_S + statistics.median(w for _, w in xs))
        out[name] = (cpu_s, statistics.median(w for _, w in xs))
        print(f"| {name} | {out[name][0]:.3f} | {out[name][1]:.3f} |")
    print(f"(medians of {args.repeat}; the server's idle CPU, {idle:.3f} CPU-s per second, subtracted)")
    return out


if __name__ == "__main__":
    main()
