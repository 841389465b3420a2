"""One measurement each: the raw consume loop, Quix Streams, the product at a batch size, its fixed cost, its latency.

The product runs the word count (``explode(split(value))``, Count per word) through
:class:`~app.coordinator.coordinator.Coordinator` and :class:`~app.spark.SparkExecutor` into an opaque state
(SQLite, or the CQL test server), each run under its own topology id reading the topic from its start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer
from prometheus_client import CollectorRegistry

from app.config.schema.pipeline import PipelineModel
from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.metrics import Metrics
from app.spark import SparkExecutor
from app.spark.reading import READ_TASK_RECORDS
from app.topology.batch import Batch, CommitStats
from app.topology.topology import Topology
from spouts.kafka import KafkaSpout, KafkaSpoutConfig
from spouts.planner import Caps
from states import Count
from states.factory import StateFactory
from tests.bench import sss_peer as sss
from tests.bench.sss_peer import Sink
from tests.bench.workload import Topic
from tests.kafka.bench_read_rate import bare_consume

PEER_PYTHON = Path(".venv-peer/bin/python")
WARM_UP = 2  # txids before measuring (Python workers start, the JIT warms up)...
#: ...of at most this many records: enough for a read task per core (local[*]), so the measured txids find
#: the Python workers they read in already started (a worker's start costs about a CPU-second)
WARM_UP_TXID = READ_TASK_RECORDS * (os.cpu_count() or 1)
#: Txids of a JIT warm-up window (:func:`jit_warm_up`): a new pipeline each, over a topic of this many thousand records
JIT_WINDOW = 50
#: The service's ``max_pending`` (the product's rows run as the service does: txid N+1 processed while N commits)
SERVICE_MAX_PENDING: int = PipelineModel.model_fields["max_pending"].default


@dataclass(frozen=True)
class WarmUp:
    """The txids a product row runs before it is measured: ``txids`` of at most ``records`` records each.

    A few txids start the Python workers and reach this row's sizes; the JVM's JIT compilers take hundreds
    of txids to settle (:func:`jit_warm_up` runs them once per process), and their CPU counts in the whole
    process tree: a row measured before that reports the JIT's warm-up as fixed cost.
    """

    txids: int = WARM_UP
    records: int = WARM_UP_TXID

    def caps(self, per_txid: int, partitions: int) -> Caps:
        """The caps of a warm-up txid before a row of ``per_txid`` records per txid."""
        small = min(per_txid, self.records)
        return Caps(max(1, small // partitions), small)

    def offsets(self, per_txid: int, partitions: int) -> int:
        """Records of each partition the warm-up txids read (the measured txids start after them)."""
        return self.txids * self.caps(per_txid, partitions).per_partition


@dataclass
class Figure:
    """One row of the table: a system's records/s (and, for the product, what a txid cost)."""

    name: str
    records: int
    seconds: float
    per_txid: int = 0  # records per txid (0: not the product)
    txids: int = 0
    jobs_per_txid: float = 0.0
    load: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    throughput: bool = True  # False: a cost or a latency, compared with nothing
    peer: str = ""  # rows of the same ``peer`` in a repetition are compared (the product against Structured Streaming)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def txid_s(self) -> float:
        return self.seconds / self.txids if self.txids else 0.0


def raw_consume(topic: Topic, repeats: int = 3) -> Figure:
    """The best of ``repeats`` bare ``Consumer.consume`` loops over the whole topic, touching key and value."""
    metas = topic.ranges()
    consumer = Consumer(KafkaSpoutConfig(topic.bootstrap, topics=(topic.name,)).consumer_config("bench-bare"))
    try:
        bare_consume_topic(consumer, metas)  # warm up
        best = float("inf")
        cpu = float("inf")
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            assert bare_consume_topic(consumer, metas) == topic.records
            best = min(best, time.perf_counter() - start)
            cpu = min(cpu, time.process_time() - start_cpu)
    finally:
        consumer.close()
    return Figure("raw Consumer.consume", topic.records, best, extra={"cpu_us_per_record": cpu / topic.records * 1e6})


def bare_consume_topic(consumer: Consumer, metas: list[Any]) -> int:
    import tests.kafka.bench_read_rate as rr

    rr.TOPIC = metas[0].topic  # the helper reads its module's topic name
    return bare_consume(consumer, metas)


#: ``kafka.reader`` of the product's pipelines and of :func:`read_arrow_cpu` (``--reader``)
READER = "auto"
#: The record columns the word count's read tasks build (the coordinates and the value)
WORD_COUNT_COLUMNS = ("topic", "partition", "offset", "value")


def read_arrow_cpu(topic: Topic) -> float:
    """CPU-µs per record of ``KafkaSpout.read_arrow`` of the word count's columns over the whole topic (best of 3,
    this process, :data:`READER`)."""
    spout = KafkaSpout(KafkaSpoutConfig(topic.bootstrap, topics=(topic.name,), reader=READER), "bench-read")
    metas = topic.ranges()
    best = float("inf")
    for _ in range(4):  # the first warms up the pooled consumer
        start = time.process_time()
        n = sum(b.num_rows for m in metas for b in spout.read_arrow(m, columns=WORD_COUNT_COLUMNS))
        best = min(best, time.process_time() - start)
        assert n == topic.records
    return best / topic.records * 1e6


def quix(topic: Topic, guarantee: str) -> Figure:
    """Quix Streams' word count (:mod:`tests.bench.quix_peer`, in its own virtualenv)."""
    out = subprocess.run([str(PEER_PYTHON), str(Path(__file__).with_name("quix_peer.py")), topic.bootstrap,
                          topic.name, str(topic.records), str(topic.words), guarantee],
                         capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode:
        last = [line for line in out.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        print(out.stderr[-3000:], file=sys.stderr)
        raise RuntimeError(f"quix {guarantee} failed: {last[0]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return Figure(f"Quix Streams word count, {guarantee}", result["records"], result["seconds"],
                  extra={k: result[k] for k in ("input_read_s", "counted_s") if k in result})


def per_txid(caps: Caps, partitions: int) -> int:
    """Records a txid of ``caps`` takes from a backlog on ``partitions`` partitions."""
    return min(caps.per_batch, caps.per_partition * partitions)


def caps_for(size: int, partitions: int) -> Caps:
    """Caps of ``size`` records per txid (an even share per partition); 0: the default caps."""
    return Caps(per_partition=max(1, size // partitions), per_batch=size) if size else Caps()


class Pipeline:
    """The product's word count over ``topic`` with caps of ``per_txid`` records (an even share per partition)."""

    def __init__(self, spark: Any, topic: Topic, factory: StateFactory, per_txid: int, *, max_pending: int = 1,
                 caps: Caps | None = None) -> None:
        self.name = f"bench-{uuid.uuid4().hex[:8]}"
        self.table = f"wc_{self.name[6:]}"
        self.spark, self.topic, self.factory = spark, topic, factory
        self.spout = KafkaSpout(KafkaSpoutConfig(topic.bootstrap, topics=(topic.name,), reader=READER), self.name)
        t = Topology(self.name)
        (t.new_stream(self.spout).map("explode(split(CAST(value AS STRING), ' ')) AS word")
         .group_by("word").persistent_aggregate(factory, Count(), output="count", name=self.table))
        self.metrics = Metrics(CollectorRegistry())
        self.executor = SparkExecutor(spark, t, metrics=self.metrics)
        self.commits = Commits(self.executor)
        caps = caps or Caps(per_partition=max(1, per_txid // topic.partitions), per_batch=per_txid)
        cfg = CoordinatorConfig(caps=caps, max_pending=max_pending, owner="bench", idle_sleep_s=0.01)
        self.coordinator = Coordinator(self.name, self.spout, self.commits, factory.txstate_store(self.name), cfg,
                                       metrics=self.metrics)
        self.coordinator.start()

    def records(self) -> float:
        return self.metrics.value("trident_records_total", pipeline=self.name)

    def jobs(self, txids: range) -> int:
        tracker = self.spark.sparkContext.statusTracker()
        return sum(len(tracker.getJobIdsForGroup(f"{self.name}:txid-{t}")) for t in txids)

    def close(self) -> None:
        self.coordinator.close()

    def check(self) -> None:
        """The state's counts equal the producer's truth over the ranges the committed txids read."""
        ends: dict[int, int] = {}
        for _, batch in self.commits.visible:
            for part, m in batch.plan.partitions.items():
                ends[part.partition] = max(ends.get(part.partition, 0), m.next_offset)
        check_counts(self.name, stored_counts(self.factory, self.table), self.topic.truth(ends))


def stored_counts(factory: StateFactory, table: str, key: str = "word", value: str = "count") -> dict[str, int]:
    """Every key's ``value`` in the product's state table, read with the database's own client."""
    if factory.backend == "sqlite":
        import sqlite3

        with sqlite3.connect(str(factory.sqlite_path)) as conn:
            return {w: int(n) for w, n in conn.execute(f'SELECT "{key}", "{value}" FROM "{table}"')}
    settings = factory.cassandra
    assert settings is not None
    with cql_session(settings) as session:
        return {r[0]: int(r[1]) for r in session.execute(f'SELECT "{key}", "{value}" FROM {settings.keyspace}.{table}')}


@contextmanager
def cql_session(settings: Any) -> Iterator[Any]:
    """A plain cassandra-driver session on the state's cluster."""
    from cassandra.cluster import Cluster
    from cassandra.policies import RoundRobinPolicy

    cluster = Cluster(list(settings.contact_points), port=settings.port, load_balancing_policy=RoundRobinPolicy())
    try:
        yield cluster.connect()
    finally:
        cluster.shutdown()


class TruthMismatch(AssertionError):  # noqa: N818, RUF100  a failed check (an AssertionError), imported by this name
    """A row's stored counts differ from the producer's truth."""


def check_counts(what: str, stored: Mapping[str, int], truth: Mapping[str, int]) -> None:
    """Raise :class:`TruthMismatch` unless ``stored`` equals ``truth`` word by word."""
    if dict(stored) != dict(truth):
        wrong = sorted(w for w in set(stored) | set(truth) if stored.get(w) != truth.get(w))
        raise TruthMismatch(f"{what}: {len(wrong)} of {len(truth)} words differ from the producer's truth, e.g. "
                            + ", ".join(f"{w} {stored.get(w)} != {truth.get(w)}" for w in wrong[:3]))


class Commits:
    """The executor, noting when each txid's commit returned (its records are then visible in the state)."""

    def __init__(self, executor: SparkExecutor) -> None:
        self.executor = executor
        self.visible: list[tuple[float, Batch]] = []

    def state_kinds(self) -> Any:
        return self.executor.state_kinds()

    def process(self, batch: Batch) -> Any:
        return self.executor.process(batch)

    def commit(self, batch: Batch, processed: Any) -> CommitStats:
        stats = self.executor.commit(batch, processed)
        self.visible.append((time.time(), batch))
        return stats

    def cancel(self, txid: int) -> None:
        self.executor.cancel(txid)

    def close(self) -> None:
        self.executor.close()


def steady(spark: Any, topic: Topic, factory: StateFactory, per_txid: int, label: str, *,
           max_pending: int = SERVICE_MAX_PENDING,
           budget: int = 150_000, caps: Caps | None = None, peer: str = "", warm_up: WarmUp = WarmUp()) -> Figure:
    """Records/s of the product at ``per_txid`` records per txid (``caps``: these caps instead), after
    ``warm_up``'s txids, over at most ``budget`` records (at least 3 txids) or the rest of the topic, with
    ``max_pending`` txids in flight (the service's default unless asked); the CPU of the whole process tree
    (driver, JVM, Python workers) per record and per txid. The state must then equal the producer's truth."""
    p = Pipeline(spark, topic, factory, per_txid, max_pending=max_pending, caps=caps)
    measured = p.coordinator.config
    try:  # warm up on small txids, so that the large sizes keep the topic for measuring
        # one txid at a time: with more in flight the next would be planned (and frozen) at the warm-up's caps
        p.coordinator.config = replace(measured, caps=warm_up.caps(per_txid, topic.partitions), max_pending=1)
        assert p.coordinator.run(max_batches=warm_up.txids) == warm_up.txids
        p.coordinator.config = measured
        first, warm = p.coordinator.committed_txid + 1, p.records()
        txids = max(3, budget // per_txid)
        cpu, start = tree_cpu_s(), time.perf_counter()
        done = p.coordinator.run(max_batches=txids, until_idle=True)
        seconds, cpu = time.perf_counter() - start, tree_cpu_s() - cpu
        records = int(p.records() - warm)
        jobs = p.jobs(range(first, first + done))
    finally:
        p.close()
    p.check()
    return Figure(label, records, seconds, per_txid, done, jobs / done if done else 0.0,
                  extra={"cpu_us_per_record": cpu / records * 1e6 if records else 0.0,
                         "cpu_s_per_txid": cpu / done if done else 0.0, "txids": done}, peer=peer)


def jit_ms(spark: Any) -> float:
    """Milliseconds the driver JVM's JIT compilers have spent so far (its ``CompilationMXBean``)."""
    return float(spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean().getTotalCompilationTime())


def jit_warm_up(spark: Any, topic: Topic, factory: StateFactory, txids: int, *, per_txid: int = 1_000,
                window: int = JIT_WINDOW, sink: Callable[[str], Sink] | None = None) -> Figure:
    """Run ``txids`` txids of ``per_txid`` records once per process, before the measured rows, so that they
    measure a JVM past the JIT's warm-up (a service runs for months); with ``sink``, as many micro-batches of
    Structured Streaming after them, so that its own code is as warm. Windows of ``window`` txids, each a new
    pipeline (or query) reading ``topic``, of ``window * per_txid`` records, from its start. The figure: the whole
    process tree's CPU and the JIT compilers' time per txid in the first and the last window."""
    cpu: list[float] = []
    jit: list[float] = []
    windows, done = max(1, txids // window), 0
    start = time.perf_counter()
    for _ in range(windows):
        cpu0, jit0 = tree_cpu_s(), jit_ms(spark)
        p = Pipeline(spark, topic, factory, per_txid)
        try:
            ran = p.coordinator.run(max_batches=window)
        finally:
            p.close()
        p.check()
        done += ran
        cpu.append((tree_cpu_s() - cpu0) / max(1, ran))
        jit.append((jit_ms(spark) - jit0) / max(1, ran))
    extra = {"cpu_s_per_txid_first": cpu[0], "cpu_s_per_txid_last": cpu[-1],
             "jit_ms_per_txid_first": jit[0], "jit_ms_per_txid_last": jit[-1]}
    if sink is not None:
        peer: list[float] = []
        for i in range(windows):
            jit0 = jit_ms(spark)
            counts = sink(f"jit_warm{i}")
            run = sss.available_now(spark, topic.bootstrap, topic.name, per_txid, counts)
            check_counts("Structured Streaming's JIT warm-up", counts.read(), topic.truth())
            peer.append((jit_ms(spark) - jit0) / max(1, len(run.batches)))
        extra |= {"sss_jit_ms_per_batch_first": peer[0], "sss_jit_ms_per_batch_last": peer[-1]}
    return Figure(f"JIT warm-up ({done} txids of {per_txid:,}{' and as many micro-batches' if sink else ''})",
                  done * per_txid, time.perf_counter() - start, per_txid, done, throughput=False, extra=extra)


def size_warm_up(spark: Any, topic: Topic, factory: StateFactory, caps: Caps,
                 sink: Callable[[str], Sink] | None = None) -> Figure:
    """Run the product over all of ``topic`` at ``caps`` (the service's ``max_pending``) and, with ``sink``,
    Structured Streaming at as many records per micro-batch, each checked against the producer's truth.

    Once per process, after :func:`jit_warm_up`: a txid of hundreds of thousands of records takes code paths
    (loops over whole read and aggregation tasks) that txids of 1,000 leave cold, so the first rows at these
    caps measured the JIT compiling them (a first pass of 6 txids of 400,000: 0.43-0.55 CPU-s per million
    records in the compiler threads, the passes after it 0.15-0.26). The figure: each side's CPU per txid and JIT
    milliseconds per txid (micro-batch) of this pass."""
    n = per_txid(caps, topic.partitions)
    cpu0, jit0, start = tree_cpu_s(), jit_ms(spark), time.perf_counter()
    p = Pipeline(spark, topic, factory, n, max_pending=SERVICE_MAX_PENDING, caps=caps)
    try:
        done = p.coordinator.run(max_batches=-(-topic.records // n) + 1, until_idle=True)
    finally:
        p.close()
    p.check()
    extra = {"cpu_s_per_txid": (tree_cpu_s() - cpu0) / max(1, done), "jit_ms_per_txid": (jit_ms(spark) - jit0) / max(1, done)}
    if sink is not None:
        counts = sink("size_warm")
        cpu0, jit0 = tree_cpu_s(), jit_ms(spark)
        run = sss.available_now(spark, topic.bootstrap, topic.name, n, counts)
        check_counts("Structured Streaming's JIT warm-up at the measured caps", counts.read(), topic.truth())
        batches = max(1, len(run.batches))
        extra |= {"sss_cpu_s_per_batch": (tree_cpu_s() - cpu0) / batches,
                  "sss_jit_ms_per_batch": (jit_ms(spark) - jit0) / batches}
    return Figure(f"JIT warm-up at {n:,} per txid ({done} txids{' and as many micro-batches' if sink else ''})",
                  topic.records, time.perf_counter() - start, n, done, throughput=False, extra=extra)


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and every live descendant (the JVM, PySpark's daemon and
    workers), from ``/proc``, and of the descendants they reaped (a worker the daemon ended: its seconds are
    its parent's ``cutime``/``cstime``, or they would leave the sum and a figure could come out negative)."""

    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for proc in Path("/proc").iterdir():
        entry = proc.name
        if not entry.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))  # fields[1]: the parent's pid
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick  # utime, stime, cutime, cstime
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def fixed_cost(spark: Any, topic: Topic, factory: StateFactory, repeats: int = 5,
               label: str = "product, 1-record txid (fixed cost)") -> Figure:
    """The median wall time of a warm 1-record txid (plan, process, freeze, commit, mark) and its Spark jobs."""
    p = Pipeline(spark, topic, factory, 1_000_000)
    try:
        p.coordinator.run_until_idle()  # everything already in the topic
        times = []
        first = p.coordinator.committed_txid + 1
        phases = ("plan", "process", "freeze", "commit")
        before: dict[str, float] = {}
        for i in range(repeats + 1):
            if i == 1:  # the first is not measured
                before = {ph: p.metrics.value("trident_phase_seconds_sum", pipeline=p.name, phase=ph) for ph in phases}
            topic.append(b"w1 w2 w3", partition=0)
            start = time.perf_counter()
            assert p.coordinator.run(max_batches=1) == 1
            assert p.coordinator.last_stats.records == 1
            times.append(time.perf_counter() - start)
        jobs = p.jobs(range(first + 1, first + repeats + 1))
        spent = {f"{ph}_ms": (p.metrics.value("trident_phase_seconds_sum", pipeline=p.name, phase=ph) - before[ph])
                 / repeats * 1000 for ph in phases}
    finally:
        p.close()
    p.check()
    return Figure(label, 1, statistics.median(times[1:]), 1, 1, jobs / repeats,
                  extra=spent, throughput=False, peer="1-record")


SENTENCE = b"w1 w2 w3 w4"  # every record of the latency run: each word counts once per record read


def latency(spark: Any, topic: Topic, factory: StateFactory, *, rate: int, seconds: float, caps: Caps,
            state: str = "SQLite") -> Figure:
    """End-to-end latency (produce -> its count visible in the state table) at a steady ``rate`` records/s.

    A producer thread writes ``rate`` sentences a second to ``topic`` (fresh: offset k of partition p is
    the k-th record produced to p) while the coordinator runs with ``caps``; each record's latency is
    the time its txid's commit returned minus the time it was produced. The state must then equal the
    producer's truth.
    """
    p = Pipeline(spark, topic, factory, caps.per_batch, caps=caps)
    sent: list[list[float]] = [[] for _ in range(topic.partitions)]
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": topic.bootstrap, "linger.ms": 5})
        tick, start, i = 0.01, time.time(), 0
        while not stop.is_set():
            due = int((time.time() - start) * rate)
            while i < due:
                part = i % topic.partitions
                producer.produce(topic.name, SENTENCE, partition=part)
                sent[part].append(time.time())
                i += 1
            producer.poll(0)
            time.sleep(tick)
        producer.flush(10)

    thread = threading.Thread(target=produce, daemon=True)
    run_stop = threading.Event()
    runner = threading.Thread(target=lambda: p.coordinator.run(run_stop), daemon=True)
    try:
        runner.start()
        thread.start()
        time.sleep(seconds)
        stop.set()
        thread.join()
        deadline = time.time() + 60
        while p.records() < sum(len(s) for s in sent) and time.time() < deadline:
            time.sleep(0.05)
        run_stop.set()
        runner.join(60)
        read = sum(m.next_offset - m.first_offset for _, b in p.commits.visible for m in b.plan.partitions.values())
        produced = sum(len(s) for s in sent)
        assert read == produced, (read, produced)  # every record produced, once
        check_counts(p.name, stored_counts(p.factory, p.table), dict.fromkeys(SENTENCE.decode().split(" "), read))
    finally:
        stop.set()
        run_stop.set()
        p.close()
    warm = seconds / 5  # the first fifth: workers start, the backlog of the start-up clears
    t0 = min(s[0] for s in sent if s)
    lat: list[float] = []
    sizes: list[int] = []
    for at, batch in p.commits.visible:
        sizes.append(batch.plan.offset_count)
        for part, m in batch.plan.partitions.items():
            lat.extend(at - sent[part.partition][off] for off in range(m.first_offset, m.next_offset)
                       if sent[part.partition][off] - t0 >= warm)
    lat.sort()
    records = sum(len(s) for s in sent)
    fig = Figure(f"product, steady {rate:,} records/s (latency), {state}", records, seconds, 0, len(sizes),
                 throughput=False)
    fig.extra = {"p50_s": lat[len(lat) // 2], "p99_s": lat[int(len(lat) * 0.99)], "max_s": lat[-1],
                 "mean_txid_records": statistics.mean(sizes) if sizes else 0.0}
    return fig



def sss_steady(spark: Any, topic: Topic, warm: Topic, sink: Callable[[str], Sink], *, size: int, label: str,
               peer: str = "", warm_up: WarmUp = WarmUp()) -> Figure:
    """Records/s of Structured Streaming (:mod:`tests.bench.sss_peer`) at ``size`` records per micro-batch
    (0: the product's default caps), from where the product's warm-up txids end to the end of the topic,
    after a warm-up query over ``warm``: the micro-batches' own time (``triggerExecution``) and the CPU
    of the whole process tree per record. The sink must then equal the producer's truth."""
    per_trigger = per_txid(caps_for(size, topic.partitions), topic.partitions)
    sss.available_now(spark, warm.bootstrap, warm.name, warm_up.caps(per_trigger, topic.partitions).per_batch,
                      sink("warm"))
    start = dict.fromkeys(range(topic.partitions), warm_up.offsets(per_trigger, topic.partitions))
    starting = json.dumps({topic.name: {str(p): o for p, o in start.items()}})
    counts = sink("run")
    run = sss.available_now(spark, topic.bootstrap, topic.name, per_trigger, counts, starting, cpu=tree_cpu_s)
    check_counts(label, counts.read(), topic.truth(starts=start))
    assert run.records == topic.records - sum(start.values()), (run.records, topic.records)
    return Figure(label, run.records, run.seconds, per_trigger, len(run.batches), peer=peer,
                  extra={"cpu_us_per_record": run.cpu_s / run.records * 1e6, "query_wall_s": run.wall_s,
                         "micro_batches": len(run.batches)})


def sss_one_record(spark: Any, topic: Topic, sink: Sink, repeats: int = 5) -> Figure:
    """The median ``triggerExecution`` of Structured Streaming's warm 1-record micro-batch (a running query,
    one record produced at a time, ``repeats`` measured after one); the sink then equals the truth."""
    trigger, wall = sss.one_record_batches(spark, topic.bootstrap, topic.name, sink,
                                           lambda: topic.append(b"w1 w2 w3", partition=0), repeats)
    check_counts("Structured Streaming, 1-record micro-batches", sink.read(), topic.truth())
    return Figure("Structured Streaming, 1-record micro-batch", 1, statistics.median(trigger), 1, 1,
                  extra={"wall_to_progress_ms": statistics.median(wall) * 1000}, throughput=False, peer="1-record")
