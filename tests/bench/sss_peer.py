"""Spark Structured Streaming's word count over the bench topic: the peer a Spark user would pick instead.

    python -m tests.bench.sss_peer --fetch     # fetch Spark's Kafka source into the bench's ivy cache once

Spark's own Kafka source (``spark-sql-kafka-0-10`` of the installed PySpark, from Maven Central into
:data:`IVY`) in the bench's SparkSession (the service's settings), ``foreachBatch`` counting words
(``explode(split(CAST(value AS STRING), ' '))``, ``groupBy(word).count()``, collected on the driver)
into a sink: Cassandra counters (``n = n + ?``, at-least-once: a replayed micro-batch counts twice) or
a SQLite table (``n = n + excluded.n``). The source is tuned as the product's reader is:
``maxOffsetsPerTrigger`` the product's records per txid, large polls and fetches (:data:`READER`),
a short fetch wait. Imports nothing of the product but the session settings.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

IVY = Path(".benchmarks/ivy")  # the bench's cache: Spark's Kafka source and its dependencies
#: The Kafka source's consumer, tuned for reading whole ranges: polls of many records, fetches of many
#: MiB (the defaults are 500 records, 1 MiB a partition), a fetch that reached the log end waiting 10 ms
#: (the product's ``fetch.wait.max.ms``) instead of 500.
READER = {"kafka.max.poll.records": "20000", "kafka.max.partition.fetch.bytes": str(4 << 20),
          "kafka.fetch.max.bytes": str(64 << 20), "kafka.fetch.max.wait.ms": "10"}


def package() -> str:
    """Maven coordinates of the Kafka source matching the installed PySpark and its Scala version."""
    import pyspark

    jars = Path(pyspark.__file__).with_name("jars")
    scala = next(p.name for p in jars.glob("spark-sql_*.jar")).split("_")[1].split("-")[0]
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"


#: Progress reports a query keeps (Spark's default is 100): a run reads its records from every micro-batch's
#: report, and a run at 1,000 records per trigger over 200,000 records has 200 of them.
PROGRESS_KEPT = 100_000


def session_conf(ivy: Path = IVY) -> dict[str, str]:
    """What the bench's SparkSession needs on top of the service's settings to run this peer."""
    return {"spark.jars.packages": package(), "spark.jars.ivy": str(ivy.resolve()),
            "spark.sql.streaming.numRecentProgressUpdates": str(PROGRESS_KEPT)}


class Sink(Protocol):
    """Where the peer's counts go: added per micro-batch, read back for the truth check."""

    label: str

    def add(self, counts: list[tuple[str, int]]) -> None: ...

    def read(self) -> dict[str, int]: ...


class SqliteCounts:
    """Counts in a local SQLite table, one transaction per micro-batch."""

    label = "SQLite"

    def __init__(self, path: Path, table: str) -> None:
        self.path, self.table = path, table
        with sqlite3.connect(path) as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (word TEXT PRIMARY KEY, n INTEGER NOT NULL)")

    def add(self, counts: list[tuple[str, int]]) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.executemany(f"INSERT INTO {self.table} VALUES (?, ?) "
                             "ON CONFLICT(word) DO UPDATE SET n = n + excluded.n", counts)

    def read(self) -> dict[str, int]:
        with sqlite3.connect(self.path) as conn:
            return dict(conn.execute(f"SELECT word, n FROM {self.table}"))


class CassandraCounters:
    """Counts in a Cassandra counter table, every word's increment in flight at ``concurrency``."""

    label = "Cassandra"

    def __init__(self, session: Any, keyspace: str, table: str, concurrency: int = 128) -> None:
        self.session, self.name, self.concurrency = session, f"{keyspace}.{table}", concurrency
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        session.execute(f"CREATE TABLE IF NOT EXISTS {self.name} (word text PRIMARY KEY, n counter)")
        self.update = session.prepare(f"UPDATE {self.name} SET n = n + ? WHERE word = ?")

    def add(self, counts: list[tuple[str, int]]) -> None:
        from cassandra.concurrent import execute_concurrent_with_args

        results = execute_concurrent_with_args(self.session, self.update, [(n, w) for w, n in counts],
                                               concurrency=self.concurrency, raise_on_first_error=True)
        assert all(r.success for r in results)

    def read(self) -> dict[str, int]:
        return {r[0]: r[1] for r in self.session.execute(f"SELECT word, n FROM {self.name}")}


@dataclass
class Run:
    """One query's micro-batches: input records and ``triggerExecution`` milliseconds of each."""

    batches: list[tuple[int, float]] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    @property
    def records(self) -> int:
        return sum(n for n, _ in self.batches)

    @property
    def seconds(self) -> float:
        return sum(ms for _, ms in self.batches) / 1000


def progress(query: Any, whole: bool = False) -> list[tuple[int, int, float]]:
    """(batch id, input rows, triggerExecution ms) of the query's recent micro-batches that read records;
    ``whole``: of all of them, or an error if Spark dropped reports (a run's records are summed from them)."""
    out = []
    reports = query.recentProgress
    if whole and len(reports) >= PROGRESS_KEPT:
        raise RuntimeError(f"{len(reports):,} micro-batches or more: Spark kept only the last "
                           f"{PROGRESS_KEPT:,} progress reports, so the run's records cannot be summed")
    for p in reports:
        d = p if isinstance(p, dict) else p.jsonValue() if hasattr(p, "jsonValue") else dict(p)
        if d["numInputRows"]:
            out.append((int(d["batchId"]), int(d["numInputRows"]), float(d["durationMs"]["triggerExecution"])))
    return out


def word_count(sink: Sink) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function: the micro-batch's word counts, collected, added to ``sink``."""
    from pyspark.sql import functions as f

    def batch(df: Any, batch_id: int) -> None:
        words = df.select(f.explode(f.split(f.col("value").cast("string"), " ")).alias("word"))
        sink.add([(r[0], int(r[1])) for r in words.groupBy("word").count().collect()])

    return batch


def source(spark: Any, bootstrap: str, topic: str, per_trigger: int, starting: str) -> Any:
    """Spark's Kafka source over ``topic`` from ``starting`` (``earliest``, ``latest`` or per-partition JSON)."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", starting)
              .option("maxOffsetsPerTrigger", str(per_trigger)))
    for key, value in READER.items():
        reader = reader.option(key, value)
    return reader.load()


def available_now(spark: Any, bootstrap: str, topic: str, per_trigger: int, sink: Sink, starting: str = "earliest",
                  cpu: Callable[[], float] = time.process_time) -> Run:
    """Everything in ``topic`` from ``starting`` in micro-batches of at most ``per_trigger`` records (the
    ``availableNow`` trigger honours the cap), then stop; its micro-batches' sizes and times, its CPU."""
    with tempfile.TemporaryDirectory() as checkpoint:
        run = Run()
        cpu0, start = cpu(), time.perf_counter()
        query = (source(spark, bootstrap, topic, per_trigger, starting).writeStream.foreachBatch(word_count(sink))
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        run.wall_s, run.cpu_s = time.perf_counter() - start, cpu() - cpu0
        if query.exception() is not None:
            raise RuntimeError(f"Structured Streaming failed: {query.exception()}")
        run.batches = [(n, ms) for _, n, ms in progress(query, whole=True)]
    return run


def one_record_batches(spark: Any, bootstrap: str, topic: str, sink: Sink, produce: Callable[[], None],
                       repeats: int = 5, timeout_s: float = 60.0) -> tuple[list[float], list[float]]:
    """A running query (default trigger: the next micro-batch as soon as one ends) on ``topic`` from its end;
    ``repeats + 1`` times one record produced and its micro-batch awaited (the first not measured).
    Returns each measured micro-batch's ``triggerExecution`` and the wall from the record's flush to its
    micro-batch's progress report (seconds)."""
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (source(spark, bootstrap, topic, 1, "latest").writeStream.foreachBatch(word_count(sink))
                 .option("checkpointLocation", checkpoint).start())
        try:
            deadline = time.monotonic() + timeout_s
            while not query.recentProgress and time.monotonic() < deadline:  # the first trigger fixed "latest"
                time.sleep(0.01)
            seen, trigger, wall = 0, [], []
            for i in range(repeats + 1):
                produce()
                start = time.perf_counter()
                while len(done := progress(query)) == seen:
                    if time.monotonic() > deadline + 60 * (i + 1) or query.exception() is not None:
                        raise RuntimeError(f"no micro-batch for the record: {query.exception()}")
                    time.sleep(0.002)
                elapsed = time.perf_counter() - start
                seen = len(done)
                if i:
                    trigger.append(done[-1][2] / 1000)
                    wall.append(elapsed)
        finally:
            query.stop()
    return trigger, wall


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def fetch(ivy: Path = IVY) -> None:
    """Start a session with the Kafka source once: Spark resolves it into ``ivy`` (Maven Central)."""
    from app.spark import spark_session

    spark = spark_session("local[1]", app_name="fetch-kafka-source", conf=session_conf(ivy))
    try:
        jars = spark.sparkContext.getConf().get("spark.jars", "")
    finally:
        spark.stop()
    artifact = package().split(":")[1]
    if not any(artifact in jar and Path(jar.removeprefix("file://")).is_file() for jar in jars.split(",")):
        raise SystemExit(f"{package()} was not fetched into {ivy} (spark.jars: {jars or 'none'})")


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fetch", action="store_true", help="fetch Spark's Kafka source into the ivy cache")
    if parser.parse_args().fetch:
        fetch()
        print(f"{package()} in {IVY}")
