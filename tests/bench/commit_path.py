"""The commit path against the raw-driver ceiling of lightweight transactions, in one run.

    python -m tests.bench commit [--keys 20000] [--service-keys 50000] [--rounds 3] [--repeat 3] [--window 64]
    python -m tests.bench commit --small 1000,10000 [--windows 16,32,64,128,256] [--repeat 5]

Against the CQL test server (its own process, so it does not share the client's interpreter) or,
when ``CASSANDRA_CONTACT_POINTS`` is set (``host[:port],...``), a real Cassandra (the bench keyspace with
``CASSANDRA_REPLICATION_FACTOR`` replicas, 1 by default):

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
of the same repetition, then the median ratio over the repetitions, and the machine load. The raw
styles speak the protocol version the product's settings do (v4 unless named).

``--small``: the small commit (:func:`small`), one warm-cache ``multi_update`` of each number of keys
against the bare async window of the same LWTs, per window size and protocol version, with the
process's CPU per key.
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
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, Session
from cassandra.concurrent import execute_concurrent
from cassandra.query import dict_factory, tuple_factory
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings
from states.cassandra.schema import replication_cql
from states.cassandra.session import NEGOTIATE_FROM
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.bench.spark_commit import ServiceCommit, requests
from tests.peers import cassandra_from_env, replication_from_env

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
                                local_dc=os.environ.get("CASSANDRA_LOCAL_DC"), replication=replication_from_env())
        return
    proc = subprocess.Popen([sys.executable, "-m", "tests.cqlserver", "--port", "0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "cqlserver listening on host:port (...)"
        host, at = line.split(" listening on ")[1].split(" ")[0].rsplit(":", 1)
        yield CassandraSettings(contact_points=(host,), port=int(at), keyspace="bench", local_dc="datacenter1")
    finally:
        proc.terminate()
        proc.wait(10)


def protocol(settings: CassandraSettings) -> int:
    """The protocol version the product's client speaks with ``settings``: the raw styles speak it too."""
    return settings.protocol_version or NEGOTIATE_FROM


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
        runs = [pool.submit(_raw_share, settings, table, values[i::processes], window, ready=ready, go=go)
                for i in range(processes)]
        for _ in range(processes):  # every process connected and prepared: start them together
            ready.get(timeout=120)
        go.set()
        spans = [r.result() for r in runs]
    return max(end for _, end in spans) - min(start for start, _ in spans)


def _raw_share(settings: CassandraSettings, table: str, values: list[tuple[Any, ...]], window: int, *,
               ready: Any, go: Any) -> tuple[float, float]:
    cluster = Cluster(list(settings.contact_points), port=settings.port, protocol_version=protocol(settings),
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
    cluster = Cluster(list(settings.contact_points), port=settings.port, execution_profiles=profiles,
                      protocol_version=protocol(settings))
    session = cluster.connect()
    table = f"{settings.keyspace}.raw_{uuid.uuid4().hex[:8]}"
    try:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} WITH replication = "
                        f"{replication_cql(settings.replication)}")
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
        rows = []
        for n, (name, style) in enumerate([("warm-up", window_tuples), *styles]):
            values = [(n + 1, n + 1, n, f"w{i}", n, n, max(n - 1, 0)) for i in range(keys)]
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


Timed = tuple[float, float, float]  # seconds of wall, of the process's CPU, of the calling thread's CPU


def timed(run: Callable[[], object]) -> Timed:
    """The wall time of ``run``, the CPU time of the whole process (the driver's event loop thread included)
    and of the calling thread (where the commit's own Python runs; the bare window sends from the loop)."""
    cpu, wall, mine = time.process_time(), time.perf_counter(), time.thread_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu, time.thread_time() - mine


class SmallCommit:
    """One protocol version's client over ``keys`` keys: a product table warm in its cache, and a raw table of
    the same shape for the bare driver's async window of the same LWTs."""

    def __init__(self, settings: CassandraSettings, version: int, keys: int) -> None:
        self.client = CassandraClient(replace(settings, protocol_version=version))
        self.version, self.keys = version, keys
        self.product = Product(self.client, keys)
        self.state = self.product.state()
        self.product.commit("new keys", self.state, 1)
        self.txid, self.n = 1, 0
        session: Session = self.client.session
        self.table = f"{settings.keyspace}.raw_{uuid.uuid4().hex[:8]}"
        session.execute(f"CREATE TABLE {self.table} (word text PRIMARY KEY, txid bigint, count bigint, "
                        "prev_count bigint)")
        put = session.prepare(f"INSERT INTO {self.table} (word, txid, count, prev_count) VALUES (?, 0, 0, 0)")
        execute_concurrent(session, [(put, (f"w{i}",)) for i in range(keys)], concurrency=64)
        self.cas = session.prepare(f"UPDATE {self.table} SET txid = ?, count = ?, prev_count = ? WHERE word = ? "
                                   "IF txid = ? AND count = ? AND prev_count = ?")

    def raw(self, window: int) -> Timed:
        n, self.n = self.n, self.n + 1
        values = [(n + 1, n + 1, n, f"w{i}", n, n, max(n - 1, 0)) for i in range(self.keys)]
        return timed(lambda: raw_window(self.client.session, self.cas, values, window))

    def commit(self, window: int) -> Timed:
        self.client.settings = replace(self.client.settings, max_concurrency=window)  # read by each new pipe
        self.txid += 1
        return timed(lambda: self.product.commit("warm cache", self.state, self.txid))


def small(base: CassandraSettings, sizes: list[int], windows: list[int], repeat: int) -> dict[str, list[float]]:
    """The small commit: per number of keys, the product's warm-cache commit and the bare driver's async window at
    each window size over protocol v4 (the default), and both at a window of 64 over v5 (the earlier default);
    each product run between two raw runs. The ceiling of a repetition is its best raw run of that size.
    Returns per row ``"<keys> <what>"`` the ratios to the ceiling, one per repetition."""
    settings = replace(base, keyspace="bench", shards=0)  # the LWT-per-key path
    runs: dict[tuple[int, int, int], SmallCommit] = {}
    found: dict[tuple[int, str, int, int], list[Timed]] = {}  # (keys, what, version, window) -> runs
    plan = [(4, w) for w in windows] + [(5, 64)]
    for rep in range(1, repeat + 1):
        for keys in sizes:
            for version, window in plan:
                if (keys, version, 0) not in runs:
                    runs[keys, version, 0] = SmallCommit(settings, version, keys)
                    runs[keys, version, 0].raw(window)  # a warm-up
                run = runs[keys, version, 0]
                for what, go in (("raw", run.raw), ("product", run.commit), ("raw", run.raw)):
                    found.setdefault((keys, what, version, window), []).append(go(window))
        print(f"repetition {rep} done; {load()}", flush=True)
    for run in runs.values():
        run.client.close()
    ratios: dict[str, list[float]] = {}
    print(f"{'keys':>6} {'':<8} {'proto':>5} {'window':>6} {'keys/s median [range]':>24} {'CPU us/key':>10} "
          f"{'caller':>6} {'x ceiling median [range]':>26}")
    for keys in sizes:
        raws = {k: v for k, v in found.items() if k[0] == keys and k[1] == "raw"}
        ceiling = [max(keys / min(v[2 * r][0], v[2 * r + 1][0]) for v in raws.values()) for r in range(repeat)]
        for (k, what, version, window), got in sorted(found.items()):
            if k != keys:
                continue
            pairs = [(min(got[2 * r][0], got[2 * r + 1][0]), got[2 * r][1] + got[2 * r + 1][1],
                      got[2 * r][2] + got[2 * r + 1][2]) for r in range(repeat)] if what == "raw" else \
                [(w, 2 * c, 2 * t) for w, c, t in got]
            rates = [keys / w for w, _, _ in pairs]
            cpu = statistics.median(1e6 * c / 2 / keys for _, c, _ in pairs)
            caller = statistics.median(1e6 * t / 2 / keys for _, _, t in pairs)
            ratio = [r / c for r, c in zip(rates, ceiling, strict=True)]
            ratios[f"{keys} {what} v{version} window {window}"] = ratio
            print(f"{keys:>6} {what:<8} {'v' + str(version):>5} {window:>6} {statistics.median(rates):>10,.0f} "
                  f"[{min(rates):,.0f}-{max(rates):,.0f}] {cpu:>10.0f} {caller:>6.0f} {statistics.median(ratio):>10.2f} "
                  f"[{min(ratio):.2f}-{max(ratio):.2f}]")
    return ratios


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
    parser.add_argument("--small", type=lambda v: [int(n) for n in v.split(",")], default=None,
                        help="only the small commit (keys per commit, comma separated)")
    parser.add_argument("--windows", type=lambda v: [int(n) for n in v.split(",")], default=[16, 32, 64, 128, 256],
                        help="window sizes of the small commit")
    args = parser.parse_args(argv)
    if args.small:
        print(f"{load()}; peer: {os.environ.get('CASSANDRA_CONTACT_POINTS') or 'CQL test server'}")
        with cassandra() as base:
            found = small(base, args.small, args.windows, args.repeat)
        print(f"done; {load()}")
        return dict(found)
    ratios: dict[str, list[float]] = {}
    counts: dict[str, list[tuple[float, float]]] = {}
    kafka = None
    if args.service_keys:
        from spouts.kafka.mock_cluster import MockKafkaCluster

        kafka = MockKafkaCluster(3)
    print(f"{load()}; peer: {os.environ.get('CASSANDRA_CONTACT_POINTS') or 'CQL test server'}")
    try:
        with cassandra() as base, tempfile.TemporaryDirectory(prefix="bench-commit-") as workdir:
            settings = CassandraSettings(**{**{f: getattr(base, f) for f in ("contact_points", "port", "local_dc",
                                                                               "replication")},
                                            "keyspace": "bench", "max_concurrency": args.window,
                                            "shards": 0})  # the LWT-per-key path, beside the bare LWT
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
