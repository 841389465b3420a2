"""``python -m app demo``: word count on Spark over an in-process Kafka into SQLite, checked.

1. Start librdkafka's mock Kafka cluster in this process (real Kafka protocol on loopback; Spark's
   worker processes connect to it like to any broker).
2. Produce ``records`` short sentences over ``partitions`` partitions and count the words produced:
   the ground truth.
3. Build the word count from a config (the same path as ``python -m app run``): opaque Kafka spout,
   Spark SQL transforms, count per word into an opaque SQLite state.
4. Run the coordinator until there is nothing new (:func:`app.coordinator.loop.run_steps`), printing one line
   per committed txid.
5. Read the table back and compare every word with the ground truth: exit 0 when all match.
"""

from __future__ import annotations

import functools
import random
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app.config import compile_pipeline, parse
from app.coordinator.coordinator import Coordinator
from app.coordinator.loop import Callbacks
from app.spark.masters import is_local

TOPIC = "sentences"
TABLE = "word_counts"
WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "cat", "a", "stream",
         "of", "records", "counted", "exactly", "once", "through", "spark", "kafka", "state", "batch",
         "txid", "opaque", "commit", "replay", "freeze", "lease", "partition", "offset")


class DemoMasterError(ValueError):
    """A Spark master the demo cannot run on: its counts live in a SQLite file on this machine."""


def run(records: int = 100_000, partitions: int = 4, *, db: str | None = None, master: str = "local[*]",
        seed: int = 7) -> int:
    """Produce, count on Spark, compare; 0 when every word's count equals what was produced."""
    from spouts.kafka.mock_cluster import MockKafkaCluster

    if not is_local(master):  # the counts live in a SQLite file: a cluster's executors would each write their own
        msg = (
            f"--master {master}: the demo keeps its counts in SQLite, a file on this machine, which a "
            "cluster's executors cannot share; run the demo on a local master (--master local[*]), "
            "and on a Spark cluster run the service with a cassandra state (python -m app run; "
            'docs/operations.md, "Run on a Spark cluster")'
        )
        raise DemoMasterError(msg)

    with tempfile.TemporaryDirectory(prefix="trident-demo-") as tmp, MockKafkaCluster(3) as kafka:
        path = Path(db) if db else Path(tmp) / "demo.db"
        path.parent.mkdir(parents=True, exist_ok=True)
        kafka.create_topic(TOPIC, partitions, 3)
        t0 = time.monotonic()
        truth = produce(kafka.bootstrap_servers(), records, partitions, seed)
        print(f"produced {records} sentences ({sum(truth.values())} words) to {partitions} partitions of "
              f"'{TOPIC}' on an in-process Kafka in {time.monotonic() - t0:.1f} s", flush=True)
        counts, stats = count_words(kafka.bootstrap_servers(), str(path), master)
    return report(counts, truth, stats)


def produce(bootstrap: str, records: int, partitions: int, seed: int) -> Counter[str]:
    """Produce the sentences; the words of every acknowledged one are the ground truth."""
    from confluent_kafka import Producer

    from spouts.kafka.client_log import logged

    rng = random.Random(seed)
    weights = [1 / (i + 1) for i in range(len(WORDS))]  # Zipf-like: a few words are frequent
    truth: Counter[str] = Counter()
    failed: list[Any] = []

    def acked(words: list[str], err: Any, _msg: Any) -> None:
        if err is None:
            truth.update(words)
        else:
            failed.append(err)

    producer = Producer(logged({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                                "queue.buffering.max.messages": 1_000_000}))
    for i in range(records):
        words = rng.choices(WORDS, weights, k=rng.randint(3, 8))
        producer.produce(TOPIC, " ".join(words).encode(), partition=i % partitions,
                         on_delivery=functools.partial(acked, words))
        if i % 5000 == 4999:
            producer.poll(0)
    if producer.flush(60) or failed:
        msg = f"producing failed: {failed[:3]} ({len(failed)} errors)"
        raise RuntimeError(msg)
    return truth


def count_words(bootstrap: str, db: str, master: str) -> tuple[dict[str, int], dict[str, float]]:
    """Run the word-count pipeline until idle; the stored counts and run statistics."""
    from app.spark.batch_executor import SparkExecutor
    from app.spark.session import spark_session
    from spouts.kafka import POOL
    from spouts.kafka.native import NATIVE_POOL

    config = parse({
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout_s": 5, "read_timeout_s": 10},
        "spark": {"master": master, "app_name": "trident-demo"},
        "pipelines": [{
            "id": "demo-word-count",
            "spout": {"topics": [TOPIC], "first_poll": "earliest", "caps": {"per_partition": 12_500,
                                                                             "per_batch": 50_000}},
            "transforms": [{"map": ["explode(split(CAST(value AS STRING), ' ')) AS word"]},
                           {"filter": "word <> ''"}],
            "group_by": ["word"],
            "aggregates": [{"count": {"as": "count"}}],
            "state": {"kind": "opaque", "backend": "sqlite", "sqlite_path": db, "table": TABLE},
            "max_pending": 2, "idle_sleep_s": 0.1,
        }],
    }, env={})
    compiled = compile_pipeline(config, "demo-word-count")
    t0 = time.monotonic()
    spark = spark_session(master=config.spark.master, app_name=config.spark.app_name)
    startup = time.monotonic() - t0
    print(f"started Spark ({master}) in {startup:.1f} s", flush=True)
    try:
        coord = Coordinator(compiled.id, compiled.topology.source(), SparkExecutor(spark, compiled.topology),
                            compiled.store(), compiled.coordinator)
        t1, records = time.monotonic(), 0

        def committed(seconds: float) -> None:
            nonlocal records
            s = coord.last_stats
            records += s.records
            print(f"  committed txid {coord.committed_txid}: {s.records} records, {s.keys_updated} keys, "
                  f"{seconds * 1000:.0f} ms", flush=True)

        try:
            coord.run(until_idle=True, callbacks=Callbacks(on_commit=committed))
        finally:
            coord.close()
            POOL.close_all()  # the driver's pooled Kafka clients must not outlive the in-process cluster
            NATIVE_POOL.close_all()
        elapsed = time.monotonic() - t1
    finally:
        spark.stop()
    with sqlite3.connect(db) as conn:
        counts = {w: int(c) for w, c in conn.execute(f"SELECT word, count FROM {TABLE}")}
    return counts, {"records": records, "seconds": elapsed, "txids": coord.committed_txid, "startup": startup}


def report(counts: dict[str, int], truth: Counter[str], stats: dict[str, float]) -> int:
    """Print the top words and the check; 0 when every key matches the ground truth."""
    rate = stats["records"] / stats["seconds"] if stats["seconds"] else 0.0
    print(f"counted {int(stats['records'])} records in {int(stats['txids'])} txids in {stats['seconds']:.1f} s: "
          f"{rate:,.0f} records/s (Spark start-up {stats['startup']:.1f} s not included)")
    print(f"\n{'word':<10} {'count':>9} {'expected':>9}")
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
        print(f"{word:<10} {n:>9} {truth[word]:>9}{'' if n == truth[word] else '  MISMATCH'}")
    wrong = sorted(w for w in set(counts) | set(truth) if counts.get(w, 0) != truth.get(w, 0))
    print(f"\ntotal words: {sum(counts.values())} stored, {sum(truth.values())} produced; "
          f"keys: {len(counts)} stored, {len(truth)} produced")
    if wrong:
        print(f"MISMATCH on {len(wrong)} keys: " + ", ".join(
            f"{w} stored {counts.get(w, 0)} expected {truth.get(w, 0)}" for w in wrong[:10]))
        return 1
    print("every key matches what was produced: exactly once")
    return 0
