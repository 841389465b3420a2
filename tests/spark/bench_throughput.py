"""Throughput of a word count on Spark local into SQLite, its fixed cost per batch, and the raw read rate.

On librdkafka's mock cluster, in one run over the same data:

* **steady state**: records/s of Coordinator + SparkExecutor (word count, opaque SQLite state)
  over ``records`` short sentences in batches of ``batch`` records, after two warm-up batches
  (Python workers start, the JVM's JIT warms up); with max_pending 1 and 2 (each run its own topology id, both
  reading the topic from the start).
* **fixed cost**: wall time of one txid of 1 record (plan, process, freeze, commit, mark), median
  of several; and process+commit of a plan without records (no Spark job at all).
* **raw read**: a bare ``Consumer.consume`` loop over the same ranges, touching key and value.

Run ``python -m tests.spark.bench_throughput [records] [batch]`` (not collected by pytest).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CollectorRegistry

from app.batch import Batch
from app.coordinator import Coordinator, CoordinatorConfig
from app.metrics import Metrics
from app.spark import SparkExecutor, spark_session
from app.topology import Topology
from spouts.kafka import POOL, KafkaSpout, KafkaSpoutConfig
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.planner import Caps
from states import Count
from states.factory import StateFactory
from tests.kafka.bench_read_rate import bare_consume

TOPIC = "bench"  # bare_consume reads this topic
PARTITIONS = 4
VOCABULARY = [f"w{i}" for i in range(1000)]
WARM_UP = 2  # batches before measuring
PHASES = ("plan", "process", "freeze", "commit")


def fill(bootstrap: str, records: int, seed: int = 1) -> int:
    """Produce ``records`` sentences of 3-8 words; returns the bytes of values produced."""
    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    size = 0
    for i in range(records):
        value = " ".join(rng.choices(VOCABULARY, k=rng.randint(3, 8))).encode()
        size += len(value)
        p.produce(TOPIC, value, partition=i % PARTITIONS)
        if i % 50_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return size


def pipeline(spark: Any, bootstrap: str, name: str, db: Path, batch: int, max_pending: int
             ) -> tuple[Coordinator, SparkExecutor, Metrics]:
    spout = KafkaSpout(KafkaSpoutConfig(bootstrap, topics=(TOPIC,)), name)
    factory = StateFactory(backend="sqlite", sqlite_path=str(db))
    topology = Topology(name)
    (topology.new_stream(spout)
     .map("explode(split(CAST(value AS STRING), ' ')) AS word")
     .group_by("word").persistent_aggregate(factory, Count(), output="count", name="word_counts"))
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, topology, metrics=metrics)
    caps = Caps(per_partition=batch // PARTITIONS, per_batch=batch)
    cfg = CoordinatorConfig(caps=caps, max_pending=max_pending, owner="bench", idle_sleep_s=0.01)
    coord = Coordinator(name, spout, executor, factory.txstate_store(name), cfg, metrics=metrics)
    coord.start()
    return coord, executor, metrics


def steady_state(spark: Any, bootstrap: str, tmp: Path, records: int, batch: int, max_pending: int) -> dict[str, float]:
    coord, executor, metrics = pipeline(spark, bootstrap, f"bench-p{max_pending}", tmp / f"p{max_pending}.db",
                                        batch, max_pending)
    try:
        coord.run(max_batches=WARM_UP)  # warm-up: workers, consumers, the SQLite table, the JVM's JIT
        warm = metrics.value("trident_records_total", pipeline=coord.topology_id)
        before = {p: metrics.value("trident_phase_seconds_sum", pipeline=coord.topology_id, phase=p) for p in PHASES}
        start = time.perf_counter()
        committed = coord.run_until_idle()
        elapsed = time.perf_counter() - start
        done = metrics.value("trident_records_total", pipeline=coord.topology_id) - warm
        assert done == records - warm, (done, records, warm)
        phases = {p: metrics.value("trident_phase_seconds_sum", pipeline=coord.topology_id, phase=p) - before[p]
                  for p in PHASES}
    finally:
        coord.close()
        executor.close()
    return {"records": done, "batches": committed, "seconds": elapsed, "rate": done / elapsed, **phases}


def fixed_cost(spark: Any, bootstrap: str, tmp: Path, repeats: int = 5) -> dict[str, float]:
    """Median seconds of a 1-record txid, end to end; and of process+commit of an empty plan."""
    coord, executor, _ = pipeline(spark, bootstrap, "bench-fixed", tmp / "fixed.db", 1_000_000, 1)
    one_record = []
    try:
        coord.run_until_idle()  # catch up with everything already in the topic
        p = Producer({"bootstrap.servers": bootstrap})
        for _ in range(repeats + 1):
            p.produce(TOPIC, b"w1 w2 w3", partition=0)
            p.flush(10)
            start = time.perf_counter()
            assert coord.run(max_batches=1) == 1 and coord.last_stats.records == 1
            one_record.append(time.perf_counter() - start)
        meta = PartitionMetadata(TOPIC, 0, 5, 5, 0, "bench-fixed")
        empty = []
        for txid in range(repeats):
            b = Batch(10_000 + txid, 1, BatchPlan(10_000 + txid, {Partition(TOPIC, 0): meta}), frozen=True)
            start = time.perf_counter()
            executor.commit(b, executor.process(b))
            empty.append(time.perf_counter() - start)
    finally:
        coord.close()
        executor.close()
    return {"one_record": statistics.median(one_record[1:]), "empty": statistics.median(empty)}


def raw_read(bootstrap: str, records: int, repeats: int = 3) -> float:
    """Best records/s of a bare consume loop over every partition's whole range."""
    conf = KafkaSpoutConfig(bootstrap, topics=(TOPIC,)).consumer_config("bench-bare")
    consumer = Consumer(conf)
    try:
        metas = []
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            metas.append(PartitionMetadata(TOPIC, p, low, high, high - low, "bench-bare"))
        total = sum(m.record_count for m in metas)
        assert total >= records
        bare_consume(consumer, metas)  # warm up
        best = 0.0
        for _ in range(repeats):
            start = time.perf_counter()
            assert bare_consume(consumer, metas) == total
            best = max(best, total / (time.perf_counter() - start))
        return best
    finally:
        consumer.close()


def main(records: int = 200_000, batch: int = 50_000) -> dict[str, Any]:
    spark = spark_session("local[*]", app_name="bench-throughput")
    cores = spark.sparkContext.defaultParallelism
    cluster = MockKafkaCluster(3)
    try:
        cluster.create_topic(TOPIC, PARTITIONS, 1)
        total = records + WARM_UP * batch  # warm-up batches, then ``records`` measured
        size = fill(cluster.bootstrap_servers(), total)
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            runs = {n: steady_state(spark, cluster.bootstrap_servers(), tmp, total, batch, n) for n in (1, 2)}
            fixed = fixed_cost(spark, cluster.bootstrap_servers(), tmp)
        bare = raw_read(cluster.bootstrap_servers(), total)
    finally:
        POOL.close_all()
        spark.stop()
        cluster.close()
    print(f"word count, Spark local[*] ({cores} task slots), SQLite opaque state, librdkafka mock cluster")
    print(f"{total:,} sentences ({size / total:.0f} bytes avg, {len(VOCABULARY)} distinct words), "
          f"{PARTITIONS} partitions; batches of {batch:,} after {WARM_UP} warm-up batches")
    for n, r in runs.items():
        print(f"  max_pending={n}: {r['records']:,.0f} records in {r['batches']} batches, {r['seconds']:.2f} s "
              f"= {r['rate']:>9,.0f} records/s  ({r['rate'] / bare:.3f} x raw consume); phase seconds: "
              + ", ".join(f"{p} {r[p]:.2f}" for p in ("plan", "process", "freeze", "commit")))
    print(f"  raw Consumer.consume:        {bare:>9,.0f} records/s")
    print(f"  fixed cost per txid: 1 record end to end {fixed['one_record'] * 1000:.0f} ms (median); "
          f"process+commit of an empty plan {fixed['empty'] * 1000:.2f} ms")
    return {"runs": runs, "fixed": fixed, "raw": bare}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    main(*args)
