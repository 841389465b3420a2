"""The throughput suite: the product against a raw consume loop, Spark Structured Streaming and Quix Streams, in one run.

    python -m tests.bench suite [--records 200000] [--sizes 1000,10000,50000,100000] [--cql-sizes 50000]
                                [--cql-shards default,0] [--repeat 3]

Once per process, before the rows: 600 txids of 1,000 records and as many micro-batches of Structured
Streaming (``--warmup-txids``), then, when a row is at the default caps, 6 txids at those caps and as many
micro-batches (``--settle-txids``), so that the rows measure both sides' JIT settled, as in a long-running
service. Per repetition, on one topic of ``records`` sentences (librdkafka's mock cluster, or the real Kafka of
``--bootstrap``; ``--partitions``, 4 by default):
raw ``Consumer.consume``; ``read_arrow``'s CPU per record; Quix Streams' word count at-least-once
and exactly-once; the product's word count at 50k per txid with ``max_pending`` 1 and 2 (rotated);
the product's word count at each records-per-txid size into SQLite (``--sizes``) and into Cassandra
(``--cql-sizes``: the Cassandra of CASSANDRA_CONTACT_POINTS, else the CQL test server; a row per
``--cql-shards`` value: ``default`` the setting unset, 0 a partition per key), each beside
Spark Structured Streaming's at the same records per micro-batch into the same kind of store
(:mod:`tests.bench.sss_peer`, on a real Kafka only; sizes rotated, the order of the two alternating);
the fixed cost of a warm 1-record txid and the Spark jobs per txid, beside Structured Streaming's
1-record micro-batch; end-to-end latency at a steady 10k records/s with the default caps, into SQLite
and into the first Cassandra layout. Every product and Structured Streaming row's stored counts must
equal the producer's truth. Prints the table (medians over
repetitions with ranges, ratios taken within each repetition) and writes a PNG of throughput and
seconds per txid against records per txid. Every figure carries the machine load measured when it
was taken.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.planner import Caps
from states.factory import StateFactory
from tests.bench import runs
from tests.bench import sss_peer as sss
from tests.bench.commit_path import cassandra
from tests.bench.runs import Figure
from tests.bench.sss_peer import CassandraCounters, Sink, SqliteCounts
from tests.bench.workload import Topic, load
from tests.kafka.fixtures import KafkaPeer, RealKafkaPeer

MAX_TXIDS = 20  # measured txids per size at most
#: Why the mock cluster runs no Structured Streaming rows (pass ``--bootstrap`` for them).
NO_SSS_ON_THE_MOCK = ("Spark's Kafka source (Kafka's Java client 4.x) gets no metadata or cluster description from "
                      "librdkafka's mock cluster: its rows need a real Kafka (--bootstrap)")


def repetition(spark: Any, cluster: KafkaPeer, rep: int, args: argparse.Namespace, tmp: Path) -> list[Figure]:
    run = args.run_id
    topic = Topic.filled(cluster, f"bench-{run}{rep}", args.records, seed=rep, partitions=args.partitions)
    figures: list[Figure] = []

    def add(fig: Figure) -> Figure:
        fig.load = load()
        figures.append(fig)
        shown = f"{fig.rate:>10,.0f} records/s" if fig.throughput else f"{fig.txid_s * 1000:>8,.0f} ms/txid"
        print(f"  {fig.name:<58} {shown}  {fig.extra or ''} [{fig.load}]", flush=True)
        return fig

    raw = add(runs.raw_consume(topic))
    raw.extra["read_arrow_cpu_us_per_record"] = runs.read_arrow_cpu(topic)
    if not args.no_quix:  # on a topic of its own: Quix Streams is slow enough that the whole topic would take minutes
        quix_rows(cluster, rep, args, add)
    sqlite = StateFactory(backend="sqlite", sqlite_path=str(tmp / f"bench-{rep}.db"))
    sss_sink = None if args.no_sss else lambda what: SqliteCounts(tmp / "sss-jit.db", sss.unique(f"sss_{what}"))
    if rep == 0 and args.warmup_txids:  # once per process: the rows after it measure a settled JIT
        jit = Topic.filled(cluster, f"jit-warm-{run}", runs.JIT_WINDOW * 1_000, partitions=args.partitions)
        add(runs.jit_warm_up(spark, jit, sqlite, args.warmup_txids, sink=sss_sink))
    if rep == 0 and args.settle_txids and (0 in args.sizes or 0 in args.cql_sizes):  # rows at the default caps
        n = runs.per_txid(Caps(), args.partitions)
        large = Topic.filled(cluster, f"jit-large-{run}", args.settle_txids * n, partitions=args.partitions)
        add(runs.size_warm_up(spark, large, sqlite, Caps(), sink=sss_sink))
    sizes = args.sizes[rep % len(args.sizes):] + args.sizes[:rep % len(args.sizes)]
    budget = {s: s * max(2, min(MAX_TXIDS, args.budget // s)) if s else args.budget for s in sizes}
    if args.pending:
        pending_rows(spark, topic, sqlite, rep=rep, args=args, add=add)
    with ExitStack() as stack:
        states: dict[str, tuple[StateFactory, Callable[[str], Sink]]] = {
            "SQLite": (sqlite, lambda what: SqliteCounts(tmp / f"sss-{rep}.db", sss.unique(f"sss_{what}")))}
        rows = [("SQLite", s) for s in sizes]
        if not args.no_cql:
            settings = stack.enter_context(cassandra())
            session = stack.enter_context(runs.cql_session(settings))
            counters = lambda what: CassandraCounters(session, settings.keyspace, sss.unique(f"sss_{what}"))  # noqa: E731
            cql = {layout_name(n): n for n in args.cql_shards}
            for name, n in cql.items():
                states[name] = (StateFactory(backend="cassandra", cassandra=replace(settings, shards=n)), counters)
            cql_sizes = args.cql_sizes[rep % len(args.cql_sizes):] + args.cql_sizes[:rep % len(args.cql_sizes)]
            rows += [(name, s) for s in cql_sizes for name in cql]
        warm = None if args.no_sss else Topic.filled(cluster, f"sss-warm-{run}{rep}", 2 * runs.WARM_UP_TXID, seed=rep,
                                                     partitions=args.partitions)
        for state, size in rows:  # the product and its peer side by side, in turns
            side_by_side(spark, topic, warm, states[state], state=state, size=size,
                         budget=budget.get(size, args.budget), rep=rep, add=add)
        add(runs.fixed_cost(spark, topic, sqlite))
        if warm is not None:
            fresh = Topic.filled(cluster, f"sss-one-{run}{rep}", 0, partitions=args.partitions)
            add(runs.sss_one_record(spark, fresh, SqliteCounts(tmp / f"sss-{rep}.db", sss.unique("sss_one"))))
        if args.latency_s:  # into SQLite, and into the first Cassandra layout of the run
            for state in ["SQLite", *[name for name in states if name != "SQLite"][:1]]:
                fresh = Topic.filled(cluster, f"latency-{run}{rep}-{len(figures)}", 0, partitions=args.partitions)
                add(runs.latency(spark, fresh, states[state][0], rate=args.rate, seconds=args.latency_s, caps=Caps(),
                                 state=state))
    return figures


def layout_name(shards: int | None) -> str:
    """A Cassandra row's name: its ``cassandra.shards`` (None: unset, the layout a new table gets by default)."""
    return "Cassandra" if shards is None else f"Cassandra, {shards} shards" if shards else "Cassandra, a partition per key"


def side_by_side(spark: Any, topic: Topic, warm: Topic | None, state_of: tuple[StateFactory, Callable[[str], Sink]],
                 *, state: str, size: int, budget: int, rep: int, add: Callable[[Figure], Figure]) -> None:
    """The product's row at ``size`` per txid into ``state`` and, unless ``warm`` is None, Structured Streaming's
    beside it (the order alternates between repetitions)."""
    factory, sink = state_of
    n = runs.per_txid(runs.caps_for(size, topic.partitions), topic.partitions)
    shown = f"{n:,}" + (" (default caps)" if not size else "")

    def product() -> None:
        add(runs.steady(spark, topic, factory, n, f"product, {shown} per txid, {state}", budget=budget,
                        caps=runs.caps_for(size, topic.partitions), peer=f"{n}/{state}"))

    def peer() -> None:
        if warm is not None:
            add(runs.sss_steady(spark, topic, warm, sink, size=size,
                                label=f"Structured Streaming, {shown} per trigger, {state}", peer=f"{n}/{state}"))

    for one in ((product,) if warm is None else (product, peer) if rep % 2 == 0 else (peer, product)):
        one()


def pending_rows(spark: Any, topic: Topic, sqlite: StateFactory, *, rep: int, args: argparse.Namespace,
                 add: Callable[[Figure], Figure]) -> None:
    """The product at ``--pending-size`` per txid with one and two txids in flight (the order alternates)."""
    for n in (1, 2) if rep % 2 else (2, 1):
        add(runs.steady(spark, topic, sqlite, args.pending_size, f"product, {args.pending_size:,} per txid, "
                        f"max_pending {n}", max_pending=n, budget=args.budget))


def quix_rows(cluster: KafkaPeer, rep: int, args: argparse.Namespace, add: Callable[[Figure], Figure]) -> None:
    """Quix Streams at-least-once and exactly-once on a topic of their own; a failure is a row, not the run's end."""
    peer_topic = Topic.filled(cluster, f"bench-peer-{args.run_id}{rep}", min(args.peer_records, args.records),
                              seed=rep, partitions=args.partitions)
    for guarantee in ("at-least-once", "exactly-once"):
        try:
            add(runs.quix(peer_topic, guarantee))
        except RuntimeError as e:  # the peer's failure is reported, not the end of the run
            print(f"  {e}".splitlines()[0][:300], flush=True)
            add(Figure(f"Quix Streams word count, {guarantee} (FAILED, see the log)", 0, 0.0, throughput=False))


PEER = "Structured Streaming"


def spread(xs: list[float], fmt: str = ".2f") -> str:
    """``median [min-max]`` of ``xs`` (just the median of one)."""
    if not xs:
        return ""
    med = format(statistics.median(xs), fmt)
    return med if len(xs) == 1 else f"{med} [{min(xs):{fmt}}-{max(xs):{fmt}}]"


def table(reps: list[list[Figure]]) -> list[str]:
    """The median of every figure over repetitions; ratios to raw consume, Structured Streaming (the row of
    the same records per batch and state; for the 1-record rows, the ratio of times) and Quix exactly-once
    taken within each repetition, with their range; the 1-minute load while the row ran."""
    by_name: dict[str, list[Figure]] = defaultdict(list)
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for figures in reps:
        base = {f.name: f.rate for f in figures}
        peers = {f.peer: f for f in figures if f.peer and f.name.startswith(PEER)}
        raw, quix = base.get("raw Consumer.consume"), base.get("Quix Streams word count, exactly-once")
        for f in figures:
            by_name[f.name].append(f)
            if raw and f.throughput:
                ratios[f.name]["raw"].append(f.rate / raw)
            if quix and f.throughput:
                ratios[f.name]["quix"].append(f.rate / quix)
            peer = peers.get(f.peer)
            if peer is not None and peer is not f and peer.seconds and f.seconds:
                ratios[f.name]["sss"].append(f.rate / peer.rate if f.throughput else f.seconds / peer.seconds)
    lines = [("| system | records/txid | records/s | x raw consume | x Structured Streaming | x Quix EOS | s per txid "
              "| CPU-s per M records | Spark jobs/txid | load | notes |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, figs in by_name.items():
        med = statistics.median
        r = ratios[name]
        notes = [f"{k} {med(f.extra[k] for f in figs if k in f.extra):.3g}"
                 for k in sorted({k for f in figs for k in f.extra} - {"cpu_us_per_record"})]
        cpu = spread([f.extra["cpu_us_per_record"] for f in figs if "cpu_us_per_record" in f.extra], ".3g")
        txid = f"{med(f.txid_s for f in figs) * 1000:,.0f} ms" if figs[0].txids else ""
        jobs = f"{med(f.jobs_per_txid for f in figs):.1f}" if figs[0].txids and not name.startswith(PEER) else ""
        loads = [float(f.load.split()[1]) for f in figs if f.load]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else ""
        rate = f"{med(f.rate for f in figs):,.0f}" if figs[0].throughput else ""
        lines.append(f"| {name} | {figs[0].per_txid or ''} | {rate} | {spread(r['raw'])} | {spread(r['sss'])} | "
                     f"{spread(r['quix'])} | {txid} | {cpu} | {jobs} | {load} | {'; '.join(notes)} |")
    return lines


def plot(reps: list[list[Figure]], path: Path, kafka: str = "librdkafka mock cluster") -> None:
    """Throughput and seconds per txid against records per txid (SQLite runs at max_pending 1), with the peers."""
    import matplotlib as mpl

    mpl.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, figures in enumerate(reps):
        for who, state, style in (("product", "SQLite", "o-C0"), ("product", "Cassandra", "s-C4"),
                                  ("product", "a partition per key", "v-C7"), ("product", "shards", "^-C6"),
                                  (PEER, "SQLite", "o:C1"), (PEER, "Cassandra", "s:C5")):
            points = sorted((f.per_txid, f.rate, f.txid_s) for f in figures
                            if f.throughput and f.name.startswith(who) and f.name.endswith(state))
            if not points:
                continue
            xs = [p[0] for p in points]
            shown = f"{who} ({'Cassandra, sharded' if state == 'shards' else state})" if not i else None
            left.plot(xs, [p[1] for p in points], style, alpha=0.7, label=shown)
            right.plot(xs, [p[2] for p in points], style, alpha=0.7, label=shown)
        for f, color in ((next((f for f in figures if f.name == "raw Consumer.consume"), None), "C2"),
                         (next((f for f in figures if f.name.endswith("exactly-once")), None), "C3")):
            if f is not None:
                left.axhline(f.rate, color=color, ls="--", alpha=0.6, label=f.name if not i else None)
    left.set(xscale="log", yscale="log", xlabel="records per txid", ylabel="records/s", title="throughput")
    right.set(xscale="log", yscale="log", xlabel="records per txid", ylabel="seconds per txid",
              title="latency of a txid (plan to commit)")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle(f"word count, {kafka}, Spark local[*]; {load()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def sizes(text: str) -> list[int]:
    """``1000,50000,default``: records per txid, 0 for the default caps."""
    return [0 if x.strip() == "default" else int(x) for x in text.split(",")]


def shard_counts(text: str) -> list[int | None]:
    """``--cql-shards``: comma-separated counts, ``default`` for the setting left unset."""
    return [None if x == "default" else int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> list[list[Figure]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="sentences on the topic (the mock keeps about 5 MB a partition)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topics (the mock keeps about 100k records each)")
    parser.add_argument("--sizes", type=sizes, default=[1000, 10_000, 50_000, 100_000],
                        help="records per txid of the SQLite rows (default: the default caps)")
    parser.add_argument("--cql-sizes", type=sizes, default=[50_000], help="records per txid of the Cassandra rows")
    parser.add_argument("--cql-shards", type=shard_counts, default=[None, 0],
                        help="cassandra.shards of the Cassandra rows, a row per value (0: a partition per key; "
                        "default: unset, the layout a new table gets by default)")
    parser.add_argument("--budget", type=int, default=200_000, help="measured records per product run at most")
    parser.add_argument("--pending-size", type=int, default=50_000, help="records per txid of the max_pending and CQL runs")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--rate", type=int, default=10_000, help="records/s of the latency run")
    parser.add_argument("--latency-s", type=float, default=20.0, help="seconds of the latency run (0: skip)")
    parser.add_argument("--plot", type=Path, default=Path("bench.png"))
    parser.add_argument("--peer-records", type=int, default=50_000, help="sentences on the Quix Streams topic")
    parser.add_argument("--no-quix", action="store_true")
    parser.add_argument("--no-cql", action="store_true")
    parser.add_argument("--no-sss", action="store_true", help="without Structured Streaming")
    parser.add_argument("--no-pending", dest="pending", action="store_false", help="without the max_pending rows")
    parser.add_argument("--warmup-txids", type=int, default=600, help="txids of 1,000 records (and as many "
                        "micro-batches of Structured Streaming) run once before the measured rows, so that they "
                        "measure a settled JIT (0: none; each row still warms up on 2)")
    parser.add_argument("--settle-txids", type=int, default=6, help="txids at the default caps (and as many "
                        "micro-batches) run once before the measured rows when a row is at the default caps: a "
                        "large txid's code paths are compiled there, not in the first row (0: none)")
    parser.add_argument("--bootstrap", help="a real Kafka's bootstrap servers (default: librdkafka's mock cluster)")
    parser.add_argument("--reader", choices=("auto", "native", "python"), default="auto",
                        help="kafka.reader of the product's pipelines")
    args = parser.parse_args(argv)
    if not args.bootstrap and not args.no_sss:
        print(f"Structured Streaming left out: {NO_SSS_ON_THE_MOCK}", flush=True)
        args.no_sss = True
    runs.READER = args.reader
    args.run_id = f"{int(time.time())}-" if args.bootstrap else ""
    if not args.no_quix and not runs.PEER_PYTHON.exists():
        parser.error(f"{runs.PEER_PYTHON} is missing: `make bench` makes it (or pass --no-quix)")
    from app.spark import spark_session

    print(f"start: {load()}", flush=True)
    spark = spark_session("local[*]", app_name="bench", conf=None if args.no_sss else sss.session_conf())
    cluster: KafkaPeer = RealKafkaPeer(args.bootstrap) if args.bootstrap else MockKafkaCluster(3)
    reps: list[list[Figure]] = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(args.repeat):
                print(f"repetition {rep + 1} of {args.repeat}", flush=True)
                reps.append(repetition(spark, cluster, rep, args, Path(d)))
    finally:
        POOL.close_all()
        spark.stop()
        cluster.close()
    print(f"\nword count over {args.records:,} sentences, {args.partitions} partitions, "
          f"{'Kafka at ' + args.bootstrap if args.bootstrap else 'librdkafka mock cluster'}, Spark local[*], "
          f"kafka.reader {args.reader}; "
          f"medians of {args.repeat}; {time.perf_counter() - started:.0f} s; end: {load()}")
    print("\n".join(table(reps)))
    try:
        plot(reps, args.plot, f"Kafka at {args.bootstrap}" if args.bootstrap else "librdkafka mock cluster")
        print(f"plot: {args.plot}")
    except ModuleNotFoundError as e:  # the bench extra is not installed: the table stands without it
        print(f"no plot: {e.name} is missing (`make bench` installs the bench extra)")
    return reps
