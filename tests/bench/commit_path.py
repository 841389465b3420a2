"""The commit path against the raw-driver ceiling of lightweight transactions, in one run.

    python -m tests.bench commit [--keys 20000] [--service-keys 50000] [--rounds 3] [--repeat 3] [--window 64]

Against the CQL test server (its own process, so it does not share the client's interpreter) or,
when ``CASSANDRA_CONTACT_POINTS`` is set (``host[:port],...``), a real Cassandra:

* **raw ceiling**: the bare driver, ``UPDATE ... IF`` on existing rows: an async window
  (``execute_async``, each callback sending the next, tuple rows), ``execute_concurrent`` with
  tuple rows and with dict rows, and the async window in 2 processes at once (as many as Spark
  ``local[2]`` runs commit tasks: on a loaded machine more processes get more CPU), measured at
  the start and again at the end of each repetition; the ceiling is the best of these eight;
* **product state** ``OpaqueMap(CasCachedMap(CassandraBackingMap))``, one ``multi_update`` of
  every key as a commit task does (one window across it): new keys, warm cache, replay of the
  committed txid, cold cache (a fresh cache over existing rows), stale cache (another writer
  committed the txid before); new keys and cold also without blind inserts;
* **service**: the commit phase of ``python -m app run`` whose every txid updates the same keys
  once (:mod:`tests.bench.spark_commit`): new keys, steady state, cold after a restart.

Prints keys/s, requests and LWTs per key (what the client sent) and the ratio to the raw ceiling
of the same repetition, then the median ratio over the repetitions, and the machine load.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.concurrent import execute_concurrent
from cassandra.query import dict_factory, tuple_factory
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.bench.spark_commit import ServiceCommit, requests
from tests.peers import cassandra_from_env

PROCESSES = 2  # client processes of the parallel raw style: Spark local[2]'s concurrent commit tasks


@dataclass(frozen=True)
class Row:
    name: str
    keys: int
    seconds: float
    requests: int
    lwts: int

    @property
    def rate(self) -> float:
        return self.keys / self.seconds if self.seconds else 0.0

    @property
    def per_key(self) -> float:
        return self.requests / self.keys

    @property
    def lwts_per_key(self) -> float:
        return self.lwts / self.keys


@contextmanager
def cassandra() -> Iterator[CassandraSettings]:
    """Settings of the peer: CASSANDRA_CONTACT_POINTS, else a CQL test server in a child process."""
    if (named := cassandra_from_env()) is not None:
        hosts, port = named
        yield CassandraSettings(contact_points=hosts, port=port, keyspace="bench",
                                local_dc=os.environ.get("CASSANDRA_LOCAL_DC"))
        return
    proc = subprocess.Popen([sys.executable, "-m", "tests.cqlserver", "--port", "0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "cqlserver listening on host:port (...)"
        host, port = line.split(" listening on ")[1].split(" ")[0].rsplit(":", 1)
        yield CassandraSettings(contact_points=(host,), port=int(port), keyspace="bench", local_dc="datacenter1")
    finally:
        proc.terminate()
        proc.wait(10)


def raw_window(session: Any, statement: Any, rows: list[tuple[Any, ...]], window: int) -> None:
    """Every row's LWT, ``window`` in flight, each answer's callback sending the next; raises if one failed."""
    pending, done, lock, failed = iter(rows), threading.Event(), threading.Lock(), []
    left = [len(rows)]

    def send() -> None:
        with lock:
            values = next(pending, None)
        if values is not None:
            session.execute_async(statement, values, execution_profile="tuples").add_callbacks(answer, answer)

    def answer(result: Any) -> None:
        if isinstance(result, BaseException) or not result[0][0]:
            failed.append(result)
        with lock:
            left[0] -= 1
            last = not left[0]
        if last:
            done.set()
        else:
            send()

    for _ in range(min(window, len(rows))):
        send()
    done.wait()
    assert not failed, failed[:3]


def raw_processes(settings: CassandraSettings, table: str, values: list[tuple[Any, ...]], window: int,
                  processes: int) -> float:
    """The async window in ``processes`` processes at once, each over its share of ``values``
    (the parallelism of a Spark commit on ``local[2]``); seconds from the first start to the last end."""
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager, ProcessPoolExecutor(processes, mp_context=spawn) as pool:
        ready, go = manager.Queue(), manager.Event()
        runs = [pool.submit(_raw_share, settings, table, values[i::processes], window, ready, go)
                for i in range(processes)]
        for _ in range(processes):  # every process connected and prepared: start them together
            ready.get(timeout=120)
        go.set()
        spans = [r.result() for r in runs]
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _raw_share(settings: CassandraSettings, table: str, values: list[tuple[Any, ...]], window: int,
               ready: Any, go: Any) -> tuple[float, float]:
    cluster = Cluster(list(settings.contact_points), port=settings.port,
                      execution_profiles={"tuples": ExecutionProfile(row_factory=tuple_factory)})
    try:
        session = cluster.connect()
        cas = session.prepare(f"UPDATE {table} SET txid = ?, count = ?, prev_count = ? WHERE word = ? "
                              "IF txid = ? AND count = ? AND prev_count = ?")
        ready.put(os.getpid())
        go.wait()
        start = time.time()
        raw_window(session, cas, values, window)
        return start, time.time()
    finally:
        cluster.shutdown()


def raw(settings: CassandraSettings, keys: int, window: int) -> list[Row]:
    """The bare driver's LWT rate on existing rows, in four call styles (after one unmeasured pass)."""
    profiles = {EXEC_PROFILE_DEFAULT: ExecutionProfile(row_factory=dict_factory),
                "tuples": ExecutionProfile(row_factory=tuple_factory)}
    cluster = Cluster(list(settings.contact_points), port=settings.port, execution_profiles=profiles)
    session = cluster.connect()
    table = f"{settings.keyspace}.raw_{uuid.uuid4().hex[:8]}"
    try:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        # The product's table and statement shape: an opaque value (txid, count, prev_count), every column compared.
        session.execute(f"CREATE TABLE {table} (word text PRIMARY KEY, txid bigint, count bigint, prev_count bigint)")
        put = session.prepare(f"INSERT INTO {table} (word, txid, count, prev_count) VALUES (?, 0, 0, 0)")
        execute_concurrent(session, [(put, (f"w{i}",)) for i in range(keys)], concurrency=window)
        cas = session.prepare(f"UPDATE {table} SET txid = ?, count = ?, prev_count = ? WHERE word = ? "
                              "IF txid = ? AND count = ? AND prev_count = ?")

        def window_tuples(values: list[tuple[Any, ...]]) -> float | None:
            raw_window(session, cas, values, window)
            return None

        def concurrent(profile: str) -> Any:
            def run(values: list[tuple[Any, ...]]) -> float | None:
                results = execute_concurrent(session, [(cas, v) for v in values], concurrency=window,
                                             execution_profile=profile)
                assert all(ok and r.was_applied for ok, r in results)
                return None
            return run

        def processes(values: list[tuple[Any, ...]]) -> float:
            return raw_processes(settings, table, values, window, PROCESSES)

        styles = [(f"raw driver, async window of {window}, tuple rows", window_tuples),
                  (f"raw driver, execute_concurrent at {window}, tuple rows", concurrent("tuples")),
                  (f"raw driver, execute_concurrent at {window}, dict rows", concurrent(EXEC_PROFILE_DEFAULT)),
                  (f"raw driver, {PROCESSES} processes, async window of {window} each", processes)]
        rows, n = [], 0
        for name, style in [("warm-up", window_tuples), *styles]:
            values = [(n + 1, n + 1, n, f"w{i}", n, n, max(n - 1, 0)) for i in range(keys)]
            n += 1
            start = time.perf_counter()
            seconds = style(values)
            rows.append(Row(name, keys, seconds or time.perf_counter() - start, keys, keys))
        return rows[1:]
    finally:
        cluster.shutdown()


class Product:
    """The product's state stack on one table, with client-side request counts."""

    def __init__(self, client: CassandraClient, keys: int) -> None:
        self.client, self.keys = client, [(f"w{i}",) for i in range(keys)]
        self.spec = MapSpec(f"product_{uuid.uuid4().hex[:8]}", StateKind.OPAQUE, (Column("word", "text"),),
                            (Column("count", "bigint"),))
        self.metrics = StateMetrics(CollectorRegistry())
        self.backing = CassandraBackingMap(client.settings, self.spec, client=client, metrics=self.metrics)

    def state(self, blind_inserts: bool = True) -> OpaqueMap:
        return OpaqueMap(CasCachedMap(self.backing, len(self.keys), blind_inserts=blind_inserts), metrics=self.metrics)

    def commit(self, name: str, state: OpaqueMap, txid: int) -> Row:
        sent = {k: requests(self.metrics.registry, k) for k in ("read", "cas", "serial_read")}
        start = time.perf_counter()
        state.begin_commit(txid)
        state.multi_update(self.keys, [combine_updater(Count(), 1)] * len(self.keys))
        state.commit(txid)
        seconds = time.perf_counter() - start
        d = {k: requests(self.metrics.registry, k) - n for k, n in sent.items()}
        return Row(name, len(self.keys), seconds, sum(d.values()), d["cas"])


def product(client: CassandraClient, keys: int) -> list[Row]:
    p = Product(client, keys)
    warm = p.state()
    rows = [p.commit("product, new keys (blind INSERT IF NOT EXISTS)", warm, 1)]
    rows.append(p.commit("product, warm cache", warm, 2))
    rows.append(p.commit("product, replay of the committed txid", warm, 2))
    rows.append(p.commit("product, cold cache (sample read shows rows: reads)", p.state(), 3))
    stale = p.state(blind_inserts=False)
    p.commit("(unmeasured) a cache filled at txid 4", stale, 4)
    p.commit("(unmeasured) another writer commits txid 5", p.state(), 5)
    rows.append(p.commit("product, stale cache (another writer since)", stale, 6))
    rows.append(p.commit("product, cold cache, reads only", p.state(blind_inserts=False), 7))
    q = Product(client, keys)
    rows.append(q.commit("product, new keys, read + LWT", q.state(blind_inserts=False), 1))
    return rows


def service_commit(kafka: Any, settings: CassandraSettings, keys: int, rounds: int, workdir: Path) -> list[Row]:
    phases = ServiceCommit(kafka, settings, keys, workdir).run(rounds)
    return [Row(f"python -m app run, commit phase, {p.name}", p.keys, p.commit_s, sum(p.requests.values()),
                p.requests["cas"]) for p in phases]


def table(rows: list[Row], ceiling: float) -> None:
    print(f"  {'':<66} {'keys/s':>9} {'req/key':>8} {'LWT/key':>8} {'x ceiling':>9}")
    for r in rows:
        print(f"  {r.name:<66} {r.rate:>9,.0f} {r.per_key:>8.2f} {r.lwts_per_key:>8.2f} {r.rate / ceiling:>9.2f}")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min) on {os.cpu_count()} cores"


def main(argv: list[str] | None = None, *, per_key: bool = False) -> dict[str, list[Any]]:
    """Runs the benchmark; returns each scenario's ratios to the ceiling per repetition, or with
    ``per_key`` its (requests, LWTs) per key."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=20_000, help="keys per txid of the state scenarios")
    parser.add_argument("--service-keys", type=int, default=50_000,
                        help="keys per txid through python -m app run (0: skip the service)")
    parser.add_argument("--rounds", type=int, default=3, help="txids per service run before its restart")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--window", type=int, default=64, help="requests in flight (max_concurrency)")
    args = parser.parse_args(argv)
    ratios: dict[str, list[float]] = {}
    counts: dict[str, list[tuple[float, float]]] = {}
    kafka = None
    if args.service_keys:
        from spouts.kafka.mock_cluster import MockKafkaCluster

        kafka = MockKafkaCluster(3)
    print(f"{load()}; peer: {os.environ.get('CASSANDRA_CONTACT_POINTS') or 'CQL test server'}")
    try:
        with cassandra() as base, tempfile.TemporaryDirectory(prefix="bench-commit-") as workdir:
            settings = CassandraSettings(**{**{f: getattr(base, f) for f in ("contact_points", "port", "local_dc")},
                                            "keyspace": "bench", "max_concurrency": args.window})
            client = CassandraClient(settings)
            try:
                for rep in range(1, args.repeat + 1):
                    rows = raw(settings, args.keys, args.window)
                    rows += product(client, args.keys)
                    if kafka is not None:
                        rows += service_commit(kafka, settings, args.service_keys, args.rounds, Path(workdir))
                    rows += [replace(r, name=f"{r.name} (again, at the end)")
                             for r in raw(settings, args.keys, args.window)]
                    ceiling = max(r.rate for r in rows if r.name.startswith("raw driver"))  # the best raw style
                    print(f"repetition {rep}: {args.keys} keys per state txid, {args.service_keys} per service txid; "
                          f"{load()}")
                    table(rows, ceiling)
                    for r in rows:
                        ratios.setdefault(r.name, []).append(r.rate / ceiling)
                        counts.setdefault(r.name, []).append((r.per_key, r.lwts_per_key))
            finally:
                client.close()
    finally:
        if kafka is not None:
            kafka.close()
    print(f"median x ceiling over {args.repeat} repetitions (same-run ratios); {load()}:")
    for name, values in ratios.items():
        print(f"  {name:<66} {statistics.median(values):>6.2f}  ({', '.join(f'{v:.2f}' for v in values)})")
    return dict(counts) if per_key else dict(ratios)
