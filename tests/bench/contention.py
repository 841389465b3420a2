"""``python -m tests.bench contention``: a reader's single-key query while the pipeline commits into its table.

    CASSANDRA_CONTACT_POINTS=HOST CASSANDRA_PORT=PORT python -m tests.bench contention --bootstrap HOST:PORT
        [--records 1600000] [--partitions 8] [--shards 0,16] [--rate 100] [--idle-s 20] [--repeat 1]

Per layout (``--shards``: 0 a partition per key, N > 0 that many shards) the word count (:class:`~tests.bench.runs.
Pipeline`) reads the whole topic at the default caps into a table of its own, after two small warm-up txids. A
reader in a process of its own (so that the driver's GIL does not count) sends ``--rate`` single-key queries a
second from one thread, synchronously (a slow answer delays the next, never a burst after it), at LOCAL_QUORUM:
``SELECT count FROM t WHERE word = ?`` with a random word of the vocabulary (on a sharded table through its
storage-attached key index, alternating with the same query given the shard, ``WHERE shard = ? AND word = ?``). The
reader runs ``--idle-s`` seconds with no commits, then while the pipeline runs, then ``--idle-s`` seconds idle
again: each query's round trip falls in the phase it was sent in (idle: both idle windows; busy: the pipeline's run;
and, within it, the queries sent while a commit was in flight). Prints p50 and p99 per layout and query, the busy to
idle ratios, and the load average; each pipeline's table must then equal the producer's truth.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Any

from app.topology.batch import Batch, CommitStats
from spouts.planner import Caps
from states.cassandra import CassandraSettings
from states.factory import StateFactory
from tests.bench import runs
from tests.bench.commit_path import cassandra
from tests.bench.workload import VOCABULARY, Topic, load
from tests.kafka.fixtures import RealKafkaPeer

SAI = "by the key index"  # a sharded table's key query without the shard (Cassandra 5.0's storage-attached index)
SHARD = "shard computed"
KEY = "partition key"


@dataclass(frozen=True)
class Sample:
    """One query: when it was sent (wall clock, seconds), its round trip (seconds) and which query it was."""

    sent: float
    seconds: float
    query: str


def read(settings: CassandraSettings, table: str, shards: int, rate: float, ready: Any, stop: Any,
         out: Connection) -> None:
    """The reader (a process of its own): ``rate`` single-key queries a second, one at a time, until ``stop``;
    sends its samples to ``out``."""
    from cassandra import ConsistencyLevel
    from cassandra.cluster import Cluster
    from cassandra.policies import RoundRobinPolicy

    from states.cassandra.shards import shard_of

    cluster = Cluster(list(settings.contact_points), port=settings.port, load_balancing_policy=RoundRobinPolicy())
    try:
        session = cluster.connect()
        name = f"{settings.keyspace}.{table}"
        queries: dict[str, tuple[Any, Callable[[str], tuple[Any, ...]]]] = {}
        by_key = session.prepare(f"SELECT count FROM {name} WHERE word = ?")
        queries[SAI if shards else KEY] = (by_key, lambda w: (w,))
        if shards:
            queries[SHARD] = (session.prepare(f"SELECT count FROM {name} WHERE shard = ? AND word = ?"),
                              lambda w: (shard_of((w,), shards), w))
        for statement, _ in queries.values():
            statement.consistency_level = ConsistencyLevel.LOCAL_QUORUM
        kinds = list(queries)
        rng = random.Random(len(table))
        for kind in kinds:  # warm the connection and each statement
            statement, args = queries[kind]
            session.execute(statement, args(VOCABULARY[0]))
        ready.set()
        samples: list[tuple[float, float, str]] = []
        due, i = time.perf_counter(), 0
        while not stop.is_set():
            if (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            due = max(due + 1 / rate, time.perf_counter())  # behind after a slow answer: no burst to catch up
            kind = kinds[i % len(kinds)]
            statement, args = queries[kind]
            word = rng.choice(VOCABULARY)
            sent, t0 = time.time(), time.perf_counter()
            rows = list(session.execute(statement, args(word)))
            samples.append((sent, time.perf_counter() - t0, kind))
            assert len(rows) <= 1
            i += 1
        out.send(samples)
    finally:
        cluster.shutdown()


class TimedCommits(runs.Commits):
    """The executor, noting when each commit started and returned (a query sent in between met a commit)."""

    def __init__(self, executor: Any) -> None:
        super().__init__(executor)
        self.spans: list[tuple[float, float]] = []

    def commit(self, batch: Batch, processed: Any) -> CommitStats:
        start = time.time()
        try:
            return super().commit(batch, processed)
        finally:
            self.spans.append((start, time.time()))


@dataclass
class Layout:
    """One layout's run: the reader's samples, the phases' bounds, the commits' spans, the load."""

    name: str
    samples: list[Sample] = field(default_factory=list)
    idle: list[tuple[float, float]] = field(default_factory=list)
    busy: tuple[float, float] = (0.0, 0.0)
    commits: list[tuple[float, float]] = field(default_factory=list)
    txids: int = 0
    loads: list[str] = field(default_factory=list)

    def latencies(self, query: str, phase: str) -> list[float]:
        """Round trips (ms) of ``query`` sent in ``phase``: idle, busy (the pipeline running) or commit."""
        def within(t: float) -> bool:
            if phase == "idle":
                return any(a <= t < b for a, b in self.idle)
            if phase == "busy":
                return self.busy[0] <= t < self.busy[1]
            return any(a <= t < b for a, b in self.commits)
        return [s.seconds * 1000 for s in self.samples if s.query == query and within(s.sent)]


def percentile(xs: list[float], p: int) -> float:
    """The ``p``-th percentile of ``xs`` (``statistics.quantiles``, inclusive)."""
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1] if len(xs) > 1 else (xs[0] if xs else 0.0)


def run_layout(spark: Any, topic: Topic, settings: CassandraSettings, shards: int, args: argparse.Namespace) -> Layout:
    """The reader idle, during the pipeline's run over the whole topic at the default caps, idle again; the
    pipeline's table then equals the producer's truth."""
    factory = StateFactory(backend="cassandra", cassandra=replace(settings, shards=shards))
    layout = Layout(f"{shards} shards" if shards else "a partition per key")
    p = runs.Pipeline(spark, topic, factory, runs.per_txid(Caps(), topic.partitions), caps=Caps(),
                      max_pending=runs.SERVICE_MAX_PENDING)
    timed = TimedCommits(p.executor)
    p.commits = timed
    p.coordinator.executor = timed
    measured = p.coordinator.config
    spawn = multiprocessing.get_context("spawn")
    ready, stop = spawn.Event(), spawn.Event()
    receive, send = spawn.Pipe(duplex=False)
    reader = None
    try:
        warm = runs.WarmUp()  # every word of the vocabulary is in the table before the reader starts
        p.coordinator.config = replace(measured, caps=warm.caps(p.coordinator.config.caps.per_batch, topic.partitions),
                                       max_pending=1)
        assert p.coordinator.run(max_batches=warm.txids) == warm.txids
        p.coordinator.config = measured
        reader = spawn.Process(target=read, args=(settings, p.table, shards, args.rate, ready, stop, send))
        reader.start()
        if not ready.wait(120):
            raise RuntimeError("the reader did not start")
        for phase in ("idle", "busy", "idle"):
            start = time.time()
            layout.loads.append(load())
            if phase == "idle":
                time.sleep(args.idle_s)
                layout.idle.append((start, time.time()))
            else:
                layout.txids = p.coordinator.run(until_idle=True)
                layout.busy = (start, time.time())
            print(f"  {layout.name}: {phase} {time.time() - start:.1f} s [{layout.loads[-1]}]", flush=True)
        stop.set()
        layout.samples = [Sample(*s) for s in receive.recv()]
        reader.join(60)
    finally:
        stop.set()
        if reader is not None and reader.is_alive():
            reader.join(30)
        p.close()
    layout.commits = timed.spans[warm.txids:]
    p.check()
    return layout


def table(layouts: list[list[Layout]]) -> list[str]:
    """Per layout and query: p50 and p99 idle, while the pipeline ran and while a commit was in flight, and the
    ratios busy/idle (medians over repetitions, taken within each)."""
    lines = [("| layout | query | idle p50 / p99 ms | pipeline running p50 / p99 ms | x p50 | x p99 "
              "| in a commit p50 / p99 ms | queries idle / busy / in a commit | load (1 min) |"), "|---|---|---|---|---|---|---|---|---|"]
    names = list(dict.fromkeys(lay.name for rep in layouts for lay in rep))
    for name in names:
        runs_of = [lay for rep in layouts for lay in rep if lay.name == name]
        for query in dict.fromkeys(s.query for s in runs_of[0].samples):
            cells: dict[str, list[float]] = {k: [] for k in ("i50", "i99", "b50", "b99", "r50", "r99", "c50", "c99")}
            counts = [0, 0, 0]
            for lay in runs_of:
                idle, busy, commit = (lay.latencies(query, ph) for ph in ("idle", "busy", "commit"))
                i50, i99, b50, b99 = (percentile(idle, 50), percentile(idle, 99), percentile(busy, 50),
                                      percentile(busy, 99))
                for k, v in (("i50", i50), ("i99", i99), ("b50", b50), ("b99", b99), ("r50", b50 / i50),
                             ("r99", b99 / i99), ("c50", percentile(commit, 50)), ("c99", percentile(commit, 99))):
                    cells[k].append(v)
                counts[0] += len(idle)
                counts[1] += len(busy)
                counts[2] += len(commit)
            med = {k: statistics.median(v) for k, v in cells.items()}
            loads = [float(x.split()[1]) for lay in runs_of for x in lay.loads]
            lines.append(f"| {name} | {query} | {med['i50']:.2f} / {med['i99']:.2f} | {med['b50']:.2f} / "
                         f"{med['b99']:.2f} | {med['r50']:.2f} | {med['r99']:.2f} | {med['c50']:.2f} / "
                         f"{med['c99']:.2f} | {counts[0]:,} / {counts[1]:,} / {counts[2]:,} | {min(loads):.1f}-{max(loads):.1f} |")
    return lines


def main(argv: list[str] | None = None) -> list[list[Layout]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", required=True, help="a real Kafka's bootstrap servers")
    parser.add_argument("--records", type=int, default=1_600_000, help="sentences on the topic (the pipeline's run)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--shards", type=lambda t: [int(x) for x in t.split(",")], default=[0, 16],
                        help="cassandra.shards of each layout (0: a partition per key)")
    parser.add_argument("--rate", type=float, default=100.0, help="the reader's queries a second")
    parser.add_argument("--idle-s", type=float, default=20.0, help="seconds of each idle window (two a layout)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions (the layouts' order alternates)")
    args = parser.parse_args(argv)
    from app.spark import spark_session
    from spouts.kafka import POOL

    print(f"start: {load()}", flush=True)
    spark = spark_session("local[*]", app_name="bench-contention")
    cluster = RealKafkaPeer(args.bootstrap)
    topic = Topic.filled(cluster, f"contention-{int(time.time())}", args.records, partitions=args.partitions)
    reps: list[list[Layout]] = []
    started = time.perf_counter()
    try:
        with cassandra() as settings:
            for rep in range(args.repeat):
                order = args.shards if rep % 2 == 0 else args.shards[::-1]
                print(f"repetition {rep + 1} of {args.repeat}", flush=True)
                reps.append([run_layout(spark, topic, settings, n, args) for n in order])
    finally:
        POOL.close_all()
        spark.stop()
        cluster.close()
    txids = [lay.txids for rep in reps for lay in rep]
    print(f"\na reader's single-key query (LOCAL_QUORUM, one thread, {args.rate:g}/s) while the word count commits at "
          f"the default caps ({runs.per_txid(Caps(), args.partitions):,} records per txid, {min(txids)}-"
          f"{max(txids)} txids a run) over {args.records:,} sentences, {args.partitions} partitions; medians of "
          f"{args.repeat}; every table equal to the producer's truth; {time.perf_counter() - started:.0f} s; "
          f"end: {load()}")
    print("\n".join(table(reps)))
    return reps
