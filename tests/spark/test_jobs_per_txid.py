"""A txid of a keyed sink costs two Spark jobs: process (read, aggregate, cache) and commit (no shuffle); a small
txid one (its process job collects the result, committed on the driver).

And its fixed cost stays small: the process job runs two stages (no extra count stage), and the
driver builds the read of a txid with the same py4j calls whatever the number of ranges.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.functions import count, count_distinct, spark_partition_id

from app.spark import SparkExecutor
from app.topology.batch import Batch
from app.topology.topology import Topology
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.faults import WhereCommitted
from tests.spark.helpers import Topic, coordinator, expected_words, lines, py4j_calls, sqlite_table, word_counts


def test_a_txid_runs_two_spark_jobs_and_the_commit_reads_the_cached_aggregate(spark: Any, spark_kafka: Any,
                                                                              tmp_path: Path) -> None:
    """Several txids of a word count committed by Spark tasks: each ran exactly two jobs (process, commit),
    the commit job ran one stage with one task per commit partition (it reads the cached aggregate); the
    counts equal the truth."""
    topic = Topic(spark_kafka)
    topic.produce(300, seed=3)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("jobs-per-txid")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology, driver_keys=0)
    executor.reads.records_per_task = 1  # a read task per core, however few the records
    coord = coordinator(topology, executor, factory.txstate_store(topology.name),
                        caps=Caps(per_partition=40, per_batch=100))
    try:
        assert coord.run_until_idle() == 3
    finally:
        coord.close()
    tracker = spark.sparkContext.statusTracker()
    for txid in (1, 2, 3):
        jobs = sorted(tracker.getJobIdsForGroup(f"{topology.name}:txid-{txid}"))
        assert len(jobs) == 2, (txid, jobs)
        process = tracker.getJobInfo(jobs[0])
        assert process is not None
        stages = [tracker.getStageInfo(s) for s in process.stageIds]
        ran = [s for s in stages if s is not None and s.numCompletedTasks > 0]
        # the reads (3 ranges in 2 tasks: the cores of local[2]), then the final aggregates cached and
        # counted: no count stage
        assert executor.read_tasks == 2
        assert [s.numCompletedTasks for s in ran] == [2, executor.commit_partitions], stages
        commit = tracker.getJobInfo(jobs[-1])
        assert commit is not None
        stages = [tracker.getStageInfo(s) for s in commit.stageIds]  # the process job's stages are listed, skipped
        ran = [s for s in stages if s is not None and s.numCompletedTasks > 0]
        assert [s.numCompletedTasks for s in ran] == [executor.commit_partitions], stages  # no shuffle, no re-read
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)


@pytest.mark.parametrize(("driver_keys", "where", "jobs"),
                         [(2_000, "driver", [1, 1, 1]), (100, "driver", [1, 1, 1]), (1, "task", [3, 2, 2])])
def test_a_result_below_the_threshold_is_committed_on_the_driver_and_a_small_txid_in_one_job(
        spark: Any, spark_kafka: Any, tmp_path: Path, driver_keys: int, where: str, jobs: list[int]) -> None:
    """Results of fewer keys than ``driver_keys`` are committed on the driver (no Python commit task: every
    commit ran outside a Spark task), others by commit tasks. A txid whose keys are expected few is one Spark
    job (its process job collects the result, the commit runs none): planned with fewer records than
    ``driver_keys`` (2,000), or with fewer keys expected than it at the keys per record of the txid before (100,
    from the second txid). A txid with no txid before it is cached and collected by one job when it holds fewer
    keys than ``driver_keys`` (100: one job); when it holds as many (1), a second job counts its cached keys and
    the commit tasks a third; the txids after it, whose txid before had as many keys, are cached and committed
    by tasks (two jobs). The counts equal the truth."""
    topic = Topic(spark_kafka)
    topic.produce(300, seed=4)
    markers = tmp_path / "markers"
    markers.mkdir()
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology(f"commit-where-{where}-{driver_keys}")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology, driver_keys=driver_keys, faults=WhereCommitted(str(markers)))
    coord = coordinator(topology, executor, factory.txstate_store(topology.name),
                        caps=Caps(per_partition=40, per_batch=100))
    try:
        assert coord.run_until_idle() == 3
    finally:
        coord.close()
    places = {p.name.split("-")[2].rstrip("0123456789") for p in markers.iterdir()}
    assert places == {where}
    assert {p.name.split("-")[1] for p in markers.iterdir()} == {"txid1", "txid2", "txid3"}
    tracker = spark.sparkContext.statusTracker()
    assert [len(tracker.getJobIdsForGroup(f"{topology.name}:txid-{t}")) for t in (1, 2, 3)] == jobs
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)


def test_the_read_of_a_txid_costs_the_driver_the_same_py4j_calls_for_any_number_of_ranges(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """The ranges travel in the read task, not as literal columns: building the read DataFrame of 6
    ranges makes as many py4j calls as building that of one (the literal columns of the old layout
    made about 24 more per range); the 6-range read still reads every range once, in two Spark
    partitions (the cores of local[2]) of three ranges each."""
    topic = Topic(spark_kafka, partitions=6)
    topic.produce(60, seed=5)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("py4j-per-read")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    executor.reads.records_per_task = 1  # a read task per core, however few the records
    metas = [PartitionMetadata(topic.name, p, 0, 10, 10, topology.name) for p in range(6)]

    def batch(n: int) -> Batch:
        return Batch(n, 1, BatchPlan(n, {Partition(topic.name, m.partition): m for m in metas[:n]}), frozen=True)

    calls: dict[int, int] = {}
    kept: list[Any] = []

    def build(n: int) -> Callable[[], Any]:
        return lambda: executor.reads.records(batch(n), metas[:n])

    for n in (1, 6, 1, 6):  # built twice each: the first of each size may warm up caches of py4j's
        calls[n], records = py4j_calls(spark, build(n))
        kept.append(records)
    assert calls[6] == calls[1], calls
    assert records.rdd.getNumPartitions() == 2
    per_task = records.groupBy(spark_partition_id().alias("task")).agg(count_distinct("partition").alias("ranges"),
                                                                       count("*").alias("records"))
    assert sorted((r["ranges"], r["records"]) for r in per_task.collect()) == [(3, 30), (3, 30)]
    assert records.count() == 60
    assert sorted(records.select("partition", "offset").collect()) == [(p, o) for p in range(6) for o in range(10)]


def test_a_txid_of_few_records_reads_in_one_task_and_a_larger_one_in_one_per_core(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A txid reads in one task per ``records_per_task`` planned records, up to the cores: 60 records in 6
    ranges read in one Spark partition by default, in two (the cores of local[2]) at 10 records a task; the
    small txid's whole process job is then one stage of one task, and the counts equal the truth."""
    topic = Topic(spark_kafka, partitions=6)
    topic.produce(60, seed=6)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("read-tasks")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    metas = [PartitionMetadata(topic.name, p, 0, 10, 10, topology.name) for p in range(6)]
    batch = Batch(1, 1, BatchPlan(1, {Partition(topic.name, m.partition): m for m in metas}), frozen=True)
    assert executor.reads.records(batch, metas).rdd.getNumPartitions() == 1
    executor.reads.records_per_task = 10
    assert executor.reads.records(batch, metas).rdd.getNumPartitions() == 2
    executor.reads.records_per_task = 10_000
    coord = coordinator(topology, executor, factory.txstate_store(topology.name),
                        caps=Caps(per_partition=10, per_batch=60))
    try:
        assert coord.run_until_idle() == 1
    finally:
        coord.close()
    tracker = spark.sparkContext.statusTracker()
    process = tracker.getJobInfo(min(tracker.getJobIdsForGroup(f"{topology.name}:txid-1")))
    assert process is not None
    stages = [tracker.getStageInfo(s) for s in process.stageIds]
    assert [s.numCompletedTasks for s in stages if s is not None and s.numCompletedTasks > 0] == [1], stages
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
