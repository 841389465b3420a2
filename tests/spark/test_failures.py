"""Failures inside Spark: a task retried by Spark, a whole job failed and the txid replayed, and
overlapping batches (max_pending=2). Every stored value is checked against the produced records."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.faults import FailOnDriver, FailTask, fired
from tests.spark.helpers import (
    Topic,
    amounts,
    coordinator,
    expected_amounts,
    expected_words,
    lines,
    sqlite_table,
    word_counts,
)

CAPS = Caps(per_partition=100, per_batch=250)


class HoldCommitUntilNextProcesses:
    """Wraps an executor: the commit of txid N waits (at most ``wait_s``) until the processing of
    txid N+1 has started, whenever records are left past N's ranges; ``overlapped`` lists the txids
    whose successor started before their commit. A coordinator that plans N+1 only after N committed
    leaves that list short instead of passing by luck of thread scheduling."""

    def __init__(self, inner: Any, ends: dict[int, int], wait_s: float = 30.0) -> None:
        self.inner, self.ends, self.wait_s = inner, ends, wait_s
        self.commits: list[int] = []
        self.overlapped: list[int] = []
        self._started: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def _event(self, txid: int) -> threading.Event:
        with self._lock:
            return self._started.setdefault(txid, threading.Event())

    def state_kinds(self) -> list[Any]:
        return self.inner.state_kinds()

    def process(self, batch: Any) -> Any:
        self._event(batch.txid).set()
        return self.inner.process(batch)

    def commit(self, batch: Any, processed: Any) -> Any:
        read = {m.partition: m.next_offset for m in batch.plan}
        if any(read.get(p, 0) < end for p, end in self.ends.items()) \
                and self._event(batch.txid + 1).wait(self.wait_s):
            self.overlapped.append(batch.txid)
        stats = self.inner.commit(batch, processed)
        self.commits.append(batch.txid)
        return stats

    def cancel(self, txid: int) -> None:
        self.inner.cancel(txid)

    def close(self) -> None:
        self.inner.close()


def _run(spark: Any, kafka: Any, tmp_path: Path, name: str, faults: Any = None, *, records: int = 600,
         max_pending: int = 1, overlap: bool = False, driver_keys: int | None = None) -> tuple[Topic, Metrics, Any]:
    """Word count + amounts over ``records`` records into SQLite with ``faults``; asserts exactness.
    ``driver_keys``: as SparkExecutor's (0: every commit by Spark tasks)."""
    topic = Topic(kafka)
    topic.produce(records, seed=zlib.crc32(name.encode()) % 1000)  # hash() differs per process
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology(name)
    stream = lines(topology, topic.spout(topology.name))
    word_counts(stream, factory)
    amounts(stream, factory)
    metrics = Metrics(CollectorRegistry())
    executor: Any = SparkExecutor(spark, topology, faults=faults, metrics=metrics, driver_keys=driver_keys)
    if overlap:
        ends: dict[int, int] = {}
        for r in topic.produced:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        executor = HoldCommitUntilNextProcesses(executor, ends)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS,
                        max_pending=max_pending, metrics=metrics)
    try:
        coord.run_until_idle()
    finally:
        coord.close()
        (executor.inner if overlap else executor).close()
    db = tmp_path / "state.db"
    assert sqlite_table(db, "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
    assert sqlite_table(db, "amounts", ["user"], ["total", "largest"]) == expected_amounts(topic.produced)
    assert metrics.value("trident_records_total", pipeline=name) == records
    return topic, metrics, executor


def test_commit_task_failing_after_some_writes_is_retried_by_spark(spark: Any, spark_kafka: Any,
                                                                   tmp_path: Path) -> None:
    """A commit task's first attempt dies after writing its keys (before its commit); Spark's retry
    rewrites them through the opaque state (same txid: recomputed from prev) and nothing is
    double counted. The coordinator never saw a failure."""
    markers = tmp_path / "markers"
    markers.mkdir()
    _, metrics, _ = _run(spark, spark_kafka, tmp_path, "fail-commit-task", FailTask("commit", 2, str(markers)),
                         driver_keys=0)
    assert fired(markers) == ["commit-txid2-batch1-task0"]
    assert metrics.value("trident_batch_replays_total", pipeline="fail-commit-task") == 0


def test_read_task_failure_is_retried_by_spark(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A read task's first attempt dies after reading its range; the retry re-reads the same range,
    and the records counted (accumulator keyed by range) are exact."""
    markers = tmp_path / "markers"
    markers.mkdir()
    _, metrics, _ = _run(spark, spark_kafka, tmp_path, "fail-read-task", FailTask("read", 1, str(markers)))
    assert fired(markers) == ["read-txid1-batch1-task0"]
    assert metrics.value("trident_batch_replays_total", pipeline="fail-read-task") == 0


def test_a_failed_commit_job_makes_the_coordinator_replay_the_txid(spark: Any, spark_kafka: Any,
                                                                   tmp_path: Path) -> None:
    """Every attempt of a commit task fails (after partial writes), so the Spark job fails; the
    coordinator replays txid 2 from its frozen plan and the totals are still exact."""
    markers = tmp_path / "markers"
    markers.mkdir()
    fault = FailTask("commit", 2, str(markers), every_attempt=True)
    _, metrics, _ = _run(spark, spark_kafka, tmp_path, "fail-commit-job", fault, driver_keys=0)
    assert fired(markers) == [f"commit-txid2-batch1-task{i}" for i in range(4)]  # local[2,4]: 4 attempts
    assert metrics.value("trident_batch_replays_total", pipeline="fail-commit-job") == 1
    assert metrics.value("trident_batches_total", pipeline="fail-commit-job", outcome="failed") == 1


@pytest.mark.parametrize("driver_keys", [2_000, 250])
def test_a_driver_side_commit_failing_after_its_writes_makes_the_coordinator_replay_the_txid(
        spark: Any, spark_kafka: Any, tmp_path: Path, driver_keys: int) -> None:
    """Small results are committed on the driver; that commit dies after writing txid 2's keys (before its
    commit) on the first batch attempt, the coordinator replays txid 2 and the totals are still exact. With
    2,000 the first attempts' results are collected by their process jobs; with 250 the first txid's result
    is cached (250 records, nothing known of their keys) and collected by its commit, later ones by their
    process jobs (their keys are few). The replay caches its result either way."""
    markers = tmp_path / "markers"
    markers.mkdir()
    _, metrics, _ = _run(spark, spark_kafka, tmp_path, "fail-driver-commit", FailOnDriver("commit", 2, str(markers)),
                         driver_keys=driver_keys)
    assert fired(markers) == ["commit-txid2-batch1-driver"]
    assert metrics.value("trident_batch_replays_total", pipeline="fail-driver-commit") == 1
    assert metrics.value("trident_batches_total", pipeline="fail-driver-commit", outcome="failed") == 1


def test_max_pending_two_overlaps_batches_and_stays_exact(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """With max_pending=2, processing of txid N+1 starts before the commit of N ends (concurrent Spark
    jobs from two threads), commits stay in order, and the totals are exact."""
    _, _, held = _run(spark, spark_kafka, tmp_path, "overlap", records=1000, max_pending=2, overlap=True)
    assert held.commits == list(range(1, len(held.commits) + 1))
    assert len(held.commits) >= 4
    assert held.overlapped == held.commits[:-1]  # every txid but the last had its successor processing
