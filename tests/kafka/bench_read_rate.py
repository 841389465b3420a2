"""Read-rate micro-benchmark: records/s through emit_partition and read_arrow vs a bare consume loop.

All three read the same ranges (one per partition, read one after the other) on librdkafka's mock
cluster, in the same run, with the same librdkafka settings (the spout's reading consumer config),
and the ratios to the bare loop are printed. The mock keeps about 5 MB per partition (older records
are dropped), so the data is spread over ``PARTITIONS`` partitions of at most 35k records each. Run ``python -m tests.kafka.bench_read_rate [records]`` or, with pytest-benchmark,
``pytest tests/kafka/bench_read_rate.py -m benchmark`` (not part of the default run: the file name
does not match ``test_*.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from spouts.kafka import POOL, KafkaSpout, KafkaSpoutConfig
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.metadata import PartitionMetadata

TOPIC = "bench"
VALUE = b"x" * 100
PARTITIONS = 4


def fill(bootstrap: str, records: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                  "queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        p.produce(TOPIC, VALUE, key=b"%08d" % i, partition=i % PARTITIONS)
        if i % 50_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0


def bare_consume(consumer: Consumer, metas: list[PartitionMetadata]) -> int:
    """The baseline: per range, assign and ``consume(num_messages=...)`` up to its end, touching key and value."""
    n = 0
    for meta in metas:
        consumer.assign([TopicPartition(TOPIC, meta.partition, meta.first_offset)])
        left = meta.next_offset - meta.first_offset
        while left:
            for m in consumer.consume(num_messages=min(10_000, left), timeout=1.0):
                if m.error() is None:
                    m.key(), m.value()
                    n += 1
                    left -= 1
                elif (error := m.error()) is not None and error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(m.error())
        consumer.unassign()
    return n


def setup(records: int) -> tuple[MockKafkaCluster, KafkaSpout, list[PartitionMetadata]]:
    if records > PARTITIONS * 35_000:
        raise ValueError(f"at most {PARTITIONS * 35_000} records fit the mock's per-partition log")
    cluster = MockKafkaCluster(3)
    cluster.create_topic(TOPIC, PARTITIONS, 1)
    fill(cluster.bootstrap_servers(), records)
    spout = KafkaSpout(KafkaSpoutConfig(cluster.bootstrap_servers(), topics=(TOPIC,)), "bench")
    metas = []
    with POOL.lease(spout.config.consumer_config("bench", role="plan")) as c:
        for p in range(PARTITIONS):
            low, high = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            assert low == 0, f"the mock dropped records of partition {p}"
            metas.append(PartitionMetadata(TOPIC, p, low, high, high - low, "bench"))
    return cluster, spout, metas


def readers(spout: KafkaSpout, metas: list[PartitionMetadata], bare: Consumer) -> dict[str, Callable[[], int]]:
    em = spout.emitter()
    return {
        "bare consume": lambda: bare_consume(bare, metas),
        "emit_partition": lambda: sum(len(em.emit_partition(m)) for m in metas),
        "read_arrow": lambda: sum(b.num_rows for m in metas for b in spout.read_arrow(m)),
    }


def best_rate(fn: Callable[[], int], expected: int, repeats: int) -> float:
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        n = fn()
        elapsed = time.perf_counter() - start
        assert n == expected, (n, expected)
        best = max(best, n / elapsed)
    return best


def main(records: int = 120_000, repeats: int = 3) -> dict[str, float]:
    cluster, spout, metas = setup(records)
    bare = Consumer(spout.config.consumer_config("bench-bare"))
    try:
        fns = readers(spout, metas, bare)
        for fn in fns.values():  # warm up: connections, pooled consumer
            fn()
        rates = {name: best_rate(fn, records, repeats) for name, fn in fns.items()}
    finally:
        bare.close()
        POOL.close_all()
        cluster.close()
    base = rates["bare consume"]
    print(f"{records} records of {len(VALUE)} bytes, best of {repeats}, librdkafka mock cluster")
    for name, rate in rates.items():
        print(f"  {name:<15} {rate:>12,.0f} records/s   {rate / base:5.2f} x bare")
    return rates


# -- pytest-benchmark -----------------------------------------------------------------------

BENCH_RECORDS = 100_000


@pytest.fixture(scope="module")
def bench_setup() -> Iterator[dict[str, Callable[[], int]]]:
    cluster, spout, metas = setup(BENCH_RECORDS)
    bare = Consumer(spout.config.consumer_config("bench-bare"))
    yield readers(spout, metas, bare)
    bare.close()
    POOL.close_all()
    cluster.close()


@pytest.mark.benchmark
@pytest.mark.parametrize("reader", ["bare consume", "emit_partition", "read_arrow"])
def test_read_rate(benchmark, bench_setup: dict[str, Callable[[], int]], reader: str) -> None:
    """Records/s of one reader over the same 100k records (compare the rows of the three)."""
    fn = bench_setup[reader]
    fn()
    n = benchmark.pedantic(fn, rounds=3, iterations=1)
    assert n == BENCH_RECORDS
    benchmark.extra_info["records_per_s"] = BENCH_RECORDS / benchmark.stats.stats.min


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 120_000)
