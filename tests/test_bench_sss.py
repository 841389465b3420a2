"""The bench's own checks: the producer's truth of a topic, the truth comparison, the ratios to Structured Streaming."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import cast

import pytest
from confluent_kafka import Consumer, TopicPartition

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.bench import runs, sss_peer, suite
from tests.bench.runs import Figure, TruthMismatch, check_counts
from tests.bench.workload import Topic


@pytest.fixture
def cluster() -> Iterator[MockKafkaCluster]:
    with MockKafkaCluster(1) as c:
        yield c


def consumed(topic: Topic) -> list[list[list[str]]]:
    """Every partition's sentences as words, in offset order, read back from the broker."""
    consumer = Consumer({"bootstrap.servers": topic.bootstrap, "group.id": "truth", "enable.auto.commit": False})
    try:
        out: list[list[list[str]]] = []
        for p in range(topic.partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic.name, p), timeout=10)
            consumer.assign([TopicPartition(topic.name, p, 0)])
            words: list[list[str]] = []
            while len(words) < high:
                for m in consumer.consume(1000, timeout=5):
                    assert m.error() is None
                    words.append(cast(bytes, m.value()).decode().split(" "))
            out.append(words)
        return out
    finally:
        consumer.close()


def test_truth_counts_the_words_of_the_offset_ranges_asked_for(cluster: MockKafkaCluster) -> None:
    topic = Topic.filled(cluster, "truth", 301, seed=7, partitions=4)
    topic.append(b"w1 w2 w3", partition=0)
    topic.produce(50, seed=8)
    read = consumed(topic)
    assert sum(len(p) for p in read) == topic.records == 352
    assert topic.truth() == Counter(w for p in read for sentence in p for w in sentence)
    starts, ends = {0: 10, 2: 3}, {0: 80, 1: 5, 2: 90, 3: 0}
    expected = Counter(w for p, sentences in enumerate(read) for sentence in sentences[starts.get(p, 0):ends[p]]
                       for w in sentence)
    assert topic.truth(ends, starts) == expected
    assert topic.truth(starts={0: 76}) == Counter(w for p, sentences in enumerate(read)
                                                  for sentence in sentences[76 if p == 0 else 0:] for w in sentence)


def test_check_counts_refuses_a_count_off_by_one_a_missing_and_an_extra_word() -> None:
    check_counts("row", {"a": 2, "b": 1}, Counter({"a": 2, "b": 1}))
    for stored in ({"a": 3, "b": 1}, {"a": 2}, {"a": 2, "b": 1, "c": 1}):
        with pytest.raises(TruthMismatch):
            check_counts("row", stored, {"a": 2, "b": 1})


def test_the_table_compares_each_product_row_with_structured_streaming_of_its_repetition() -> None:
    def rep(product: float, peer: float, one: float, one_peer: float) -> list[Figure]:
        return [Figure("raw Consumer.consume", 1000, 1.0),
                Figure("product, 50,000 per txid, Cassandra", 1000, product, 50_000, 1, peer="50000/Cassandra"),
                Figure("Structured Streaming, 50,000 per trigger, Cassandra", 1000, peer, 50_000, 1,
                       peer="50000/Cassandra"),
                Figure("product, 50,000 per txid, SQLite", 1000, product, 50_000, 1, peer="50000/SQLite"),
                Figure("product, 1-record txid (fixed cost)", 1, one, 1, 1, throughput=False, peer="1-record"),
                Figure("Structured Streaming, 1-record micro-batch", 1, one_peer, 1, 1, throughput=False,
                       peer="1-record")]

    lines = suite.table([rep(1.0, 2.0, 0.3, 0.6), rep(1.0, 1.0, 0.2, 0.5), rep(1.0, 4.0, 0.4, 0.4)])
    cells = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines[2:]}
    assert cells["product, 50,000 per txid, Cassandra"][4] == "2.00 [1.00-4.00]"  # records/s over the peer's
    assert cells["product, 50,000 per txid, SQLite"][4] == ""  # no peer row of its kind
    assert cells["product, 1-record txid (fixed cost)"][4] == "0.50 [0.40-1.00]"  # seconds over the peer's
    assert cells["Structured Streaming, 50,000 per trigger, Cassandra"][3] == "0.50 [0.25-1.00]"  # x raw consume


def test_the_kafka_source_matches_the_installed_pyspark() -> None:
    import pyspark

    name = sss_peer.package()
    assert name.startswith("org.apache.spark:spark-sql-kafka-0-10_2.")
    assert name.endswith(f":{pyspark.__version__}")


def test_make_bench_gives_the_bad_records_rows_the_suites_kafka_and_a_named_cassandra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.bench.__main__ import badrecords_args

    monkeypatch.delenv("CASSANDRA_CONTACT_POINTS", raising=False)
    assert badrecords_args(["--repeat", "3", "--bootstrap", "k:9092"]) == ["--bootstrap", "k:9092"]
    assert badrecords_args(["--bootstrap=k:9092"]) == ["--bootstrap=k:9092"]
    assert badrecords_args(["--repeat", "3"]) == []
    monkeypatch.setenv("CASSANDRA_CONTACT_POINTS", "127.0.0.1")
    assert badrecords_args([]) == ["--state", "cassandra"]


def test_the_process_trees_cpu_keeps_the_seconds_of_a_worker_that_exited() -> None:
    """A child process burns CPU in a grandchild it then reaps (as PySpark's daemon ends a worker): the tree's
    CPU seconds keep the grandchild's after it exited (they were lost, and a figure came out negative)."""
    burn = ("import os, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    end = time.process_time() + 0.5\n"
            "    while time.process_time() < end: pass\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n"
            "print('reaped', flush=True)\n"
            "time.sleep(30)\n")
    before = runs.tree_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "reaped\n"
        assert runs.tree_cpu_s() - before >= 0.45
    finally:
        child.kill()
        child.wait()


class _Query:
    """A stand-in for a finished streaming query: only its progress reports."""

    def __init__(self, reports: int, rows: int = 1000) -> None:
        self.recentProgress = [{"batchId": i, "numInputRows": rows, "durationMs": {"triggerExecution": 5}}
                               for i in range(reports)]


def test_a_run_is_summed_from_every_micro_batch_or_refused() -> None:
    """Spark keeps the last ``numRecentProgressUpdates`` reports (100 by default): a run of 200 micro-batches
    was summed from its last 100 and read "99,000 of 200,000". The session keeps far more, and a run that
    reaches the limit is refused instead of summed short."""
    kept = int(sss_peer.session_conf()["spark.sql.streaming.numRecentProgressUpdates"])
    assert kept == sss_peer.PROGRESS_KEPT >= 200_000 // 1000 * 10
    assert sum(n for _, n, _ in sss_peer.progress(_Query(200), whole=True)) == 200_000
    with pytest.raises(RuntimeError, match="progress reports"):
        sss_peer.progress(_Query(sss_peer.PROGRESS_KEPT), whole=True)
    assert len(sss_peer.progress(_Query(sss_peer.PROGRESS_KEPT))) == sss_peer.PROGRESS_KEPT  # a running query's look


def test_the_cassandra_rows_name_their_layout_and_default_to_the_unset_setting() -> None:
    assert suite.shard_counts("default,0,16") == [None, 0, 16]
    assert [suite.layout_name(n) for n in (None, 0, 16)] == [
        "Cassandra", "Cassandra, a partition per key", "Cassandra, 16 shards"]
