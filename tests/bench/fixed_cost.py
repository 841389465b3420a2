"""``python -m tests.bench fixedcost``: CPU per txid of variants of the executor, side by side in one process.

    python -m tests.bench fixedcost --bootstrap HOST:PORT [--sizes 1000,50000] [--txids 10,3] [--repeat 3]

One SparkSession, one topic (8 partitions, short sentences), the word count into SQLite: first
``--warmup-txids`` txids of 1,000 records in a pipeline of their own (the JVM's JIT settles), then one
pipeline per variant (each its own topology, state file and warm-up txids), and in every repetition,
for each size, a window of txids of each variant in turn (the order alternates between repetitions).
A window's cost is the CPU of the whole process tree (driver, JVM, Python workers) over its txids.
Per variant it prints the median CPU-s per txid at each size, the ratio to the first variant within
each repetition, and a line through the two sizes: CPU-s per txid plus CPU-s per million records.
Every variant's state must then equal the producer's truth.

A variant is a function that adjusts a fresh :class:`~app.spark.SparkExecutor`; :data:`VARIANTS` holds
the named comparisons (``--compare``), and :func:`measure` takes any others.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app.spark import SparkExecutor
from app.spark.processing import COLLECT_ALL
from app.spark.tasks import spark_arrow_schema
from spouts.kafka import POOL
from states.factory import StateFactory
from tests.bench import runs
from tests.bench.workload import Topic, load
from tests.kafka.fixtures import RealKafkaPeer

Variant = Callable[[SparkExecutor], None]


def _tasks_only(executor: SparkExecutor) -> None:
    executor.commits.driver_keys = 0  # every keyed result committed by Spark tasks


def _read_per_core(executor: SparkExecutor) -> None:
    executor.reads.records_per_task = 1  # one read task per core, whatever the txid's records


def _python_reader(executor: SparkExecutor) -> None:
    """Read tasks build batches from confluent-kafka's messages (``kafka.reader: python``)."""
    spout: Any = executor.reads.spout
    spout.config = replace(spout.config, reader="python")


def _native_reader(executor: SparkExecutor) -> None:
    spout: Any = executor.reads.spout
    spout.config = replace(spout.config, reader="native")


def _before(executor: SparkExecutor) -> None:
    """Commit tasks and a read task per core: the executor before the driver-side commit and the packed reads."""
    _tasks_only(executor)
    _read_per_core(executor)


def _keys_checked_per_row(executor: SparkExecutor) -> None:
    """Keys the state cannot store checked by an observation on every row (before the per-key check), which
    names records by their coordinates, so every run reads them."""
    per_row = executor.runs.checked_per_row

    def checked(c: Any, records: Any, partitions: int, left_out: Any, *, named: Any = None, **how: Any) -> Any:
        return per_row(c, records, partitions, left_out, **how)

    executor.runs.checked_per_key = checked  # type: ignore[method-assign]  # the old path
    executor.reads.planned = None


def _results_cached(executor: SparkExecutor) -> None:
    """Every result cached by its process job and collected by its commit (before small txids' were collected)."""
    results = executor.runs.results

    def cached(records: Any, partitions: int, **how: Any) -> Any:
        return results(records, partitions, **{**how, "collect": False})

    executor.runs.results = cached  # type: ignore[method-assign]  # the old path


def _unsure_cached(executor: SparkExecutor) -> None:
    """A txid whose keys are unsure cached and counted, then collected by its commit (before the bounded collect)."""
    collects = executor.commits.collects

    def cached_unless_sure(batch: Any, planned: int) -> int:
        n = collects(batch, planned)
        return n if n >= COLLECT_ALL else 0

    executor.commits.collects = cached_unless_sure  # type: ignore[method-assign]  # the old rule


def _every_column(executor: SparkExecutor) -> None:
    """Every record column read and handed to Spark, used or not (before the reads built the used ones only)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = spark_arrow_schema(executor.spout.arrow_schema)
    executor.reads.arrow_schema, executor.reads.columns, executor.reads.planned = schema, None, None
    executor.reads.records_schema = executor.records_schema = from_arrow_schema(schema, prefer_timestamp_ntz=False)


def _coordinates_read(executor: SparkExecutor) -> None:
    """Every run reads the coordinates (before a planned run that names no record read only what its plans use)."""
    executor.reads.planned = None


def _as_configured(executor: SparkExecutor) -> None:
    """The executor as built."""


#: Named comparisons: the first variant of each is the base of the ratios.
VARIANTS: dict[str, dict[str, Variant]] = {
    "driver-commit": {"commit tasks": _tasks_only, "driver-side commit": _as_configured},
    "read-tasks": {"a read task per core": _read_per_core, "a read task per 10k records": _as_configured},
    "all": {"before": _before, "after": _as_configured},
    "key-check": {"keys checked per row": _keys_checked_per_row, "keys checked per key": _as_configured},
    "collect": {"results cached": _results_cached, "results of few keys collected by the process job": _as_configured},
    "columns": {"every record column read": _every_column, "the used columns read": _as_configured},
    "reader": {"confluent-kafka's messages": _python_reader, "the native reader": _native_reader},
    "coordinates": {"the coordinates read": _coordinates_read, "the planned columns read": _as_configured},
    "unsure-keys": {"unsure keys cached": _unsure_cached, "unsure keys cached and collected": _as_configured},
}
WARM_TXIDS = 3  # each variant's own warm-up txids (its Python workers' caches, its state's tables)


@dataclass(frozen=True)
class Window:
    """Consecutive txids of one variant at one size: their CPU (whole process tree) and wall time."""

    variant: str
    rep: int
    size: int
    txids: int
    records: int
    cpu_s: float
    wall_s: float
    load: float

    @property
    def cpu_per_txid(self) -> float:
        return self.cpu_s / self.txids if self.txids else 0.0


def measure(spark: Any, topic: Topic, variants: Mapping[str, Variant], *, sizes: Sequence[int], txids: Sequence[int],
            repeat: int, tmp: Path) -> list[Window]:
    """The windows of every variant, size and repetition (see the module); checks each variant's state."""
    pipelines = {}
    for i, (name, adjust) in enumerate(variants.items()):
        factory = StateFactory(backend="sqlite", sqlite_path=str(tmp / f"variant-{i}.db"))
        p = runs.Pipeline(spark, topic, factory, 1_000)
        adjust(p.executor)
        assert p.coordinator.run(max_batches=WARM_TXIDS) == WARM_TXIDS
        pipelines[name] = p
    windows = []
    try:
        for rep in range(repeat):
            order = list(pipelines) if rep % 2 == 0 else list(reversed(pipelines))
            for size, n in zip(sizes, txids, strict=True):
                for name in order:
                    p = pipelines[name]
                    p.coordinator.config = replace(p.coordinator.config, caps=runs.caps_for(size, topic.partitions))
                    records, cpu, start = p.records(), runs.tree_cpu_s(), time.perf_counter()
                    done = p.coordinator.run(max_batches=n)
                    w = Window(name, rep, size, done, int(p.records() - records), runs.tree_cpu_s() - cpu,
                               time.perf_counter() - start, float(load().split()[1]))
                    if w.records != size * n:
                        msg = f"{name}: {w.records} records in {done} txids, not {n} of {size}"
                        raise RuntimeError(msg)
                    windows.append(w)
                    print(f"  rep {rep + 1} {name:<24} {size:>7,} per txid: {w.cpu_per_txid:.3f} CPU-s/txid "
                          f"{w.wall_s / max(1, done):.3f} s/txid [load {w.load:.1f}]", flush=True)
    finally:
        for p in pipelines.values():
            p.close()
    for p in pipelines.values():
        p.check()
    return windows


def fit(small: Window, large: Window) -> tuple[float, float]:
    """A line through two windows' CPU per txid: (CPU-s per txid, CPU-s per million records)."""
    slope = (large.cpu_per_txid - small.cpu_per_txid) / (large.size - small.size)
    return small.cpu_per_txid - slope * small.size, slope * 1e6


def report(windows: Sequence[Window], names: Sequence[str]) -> list[str]:
    """Medians over repetitions, with ranges: CPU per txid per size, ratios to ``names[0]``, the two-size fit."""
    def spread(xs: list[float]) -> str:
        return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"

    sizes = sorted({w.size for w in windows})
    reps = sorted({w.rep for w in windows})
    at = {(w.variant, w.rep, w.size): w for w in windows}
    lines = ["| variant | " + " | ".join(f"CPU-s/txid at {s:,} | x {names[0]}" for s in sizes)
             + " | fit: CPU-s per txid | fit: CPU-s per M records | load |",
             "|---" * (1 + 2 * len(sizes) + 3) + "|"]
    for name in names:
        cells = []
        for s in sizes:
            mine = [at[name, r, s].cpu_per_txid for r in reps]
            ratio = [at[name, r, s].cpu_per_txid / at[names[0], r, s].cpu_per_txid for r in reps]
            cells += [spread(mine), spread(ratio)]
        fits = [fit(at[name, r, sizes[0]], at[name, r, sizes[-1]]) for r in reps] if len(sizes) > 1 else []
        loads = [w.load for w in windows if w.variant == name]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {spread([f[0] for f in fits]) if fits else ''} | "
                     f"{spread([f[1] for f in fits]) if fits else ''} | {min(loads):.1f}-{max(loads):.1f} |")
    return lines


def main(argv: list[str] | None = None) -> list[Window]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", required=True, help="a real Kafka's bootstrap servers")
    parser.add_argument("--compare", choices=sorted(VARIANTS), default="driver-commit")
    parser.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")], default=[1_000, 50_000])
    parser.add_argument("--txids", type=lambda t: [int(x) for x in t.split(",")], default=[10, 3],
                        help="txids per window at each size")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--warmup-txids", type=int, default=600, help="txids of 1,000 records before any variant")
    args = parser.parse_args(argv)
    variants = VARIANTS[args.compare]
    windows = run(args.bootstrap, variants, sizes=args.sizes, txids=args.txids, repeat=args.repeat,
                  partitions=args.partitions, warmup_txids=args.warmup_txids)
    print("\n".join(report(windows, list(variants))))
    return windows


def run(bootstrap: str, variants: Mapping[str, Variant], *, sizes: Sequence[int], txids: Sequence[int], repeat: int,
        partitions: int = 8, warmup_txids: int = 600) -> list[Window]:
    """:func:`measure` on a fresh topic of the real Kafka at ``bootstrap`` after the process's JIT warm-up."""
    from app.spark import spark_session

    print(f"start: {load()}", flush=True)
    spark = spark_session("local[*]", app_name="bench-fixed-cost")
    cluster = RealKafkaPeer(bootstrap)
    need = max(runs.JIT_WINDOW * 1_000, WARM_TXIDS * 1_000 + repeat * sum(s * n for s, n in zip(sizes, txids, strict=True)))
    topic = Topic.filled(cluster, f"bench-fixed-{int(time.time())}", need + 1_000, partitions=partitions)
    try:
        with tempfile.TemporaryDirectory() as d:
            if warmup_txids:
                warm = runs.jit_warm_up(spark, topic, StateFactory(backend="sqlite", sqlite_path=f"{d}/warm.db"),
                                        warmup_txids)
                print(f"  {warm.name}: {warm.extra} [{load()}]", flush=True)
            return measure(spark, topic, variants, sizes=sizes, txids=txids, repeat=repeat, tmp=Path(d))
    finally:
        POOL.close_all()
        spark.stop()
        print(f"end: {load()}", flush=True)
