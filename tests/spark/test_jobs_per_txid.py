"""A txid of a keyed sink costs two Spark jobs: process (read, aggregate, cache) and commit (no shuffle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.spark import SparkExecutor
from app.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.helpers import Topic, coordinator, expected_words, lines, sqlite_table, word_counts


def test_a_txid_runs_two_spark_jobs_and_the_commit_reads_the_cached_aggregate(spark: Any, spark_kafka: Any,
                                                                              tmp_path: Path) -> None:
    """Several txids of a word count: each ran exactly two jobs (process, commit), the commit job ran one
    stage with one task per commit partition (it reads the cached aggregate); the counts equal the truth."""
    topic = Topic(spark_kafka)
    topic.produce(300, seed=3)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("jobs-per-txid")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
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
        commit = tracker.getJobInfo(jobs[-1])
        assert commit is not None
        stages = [tracker.getStageInfo(s) for s in commit.stageIds]  # the process job's stages are listed, skipped
        ran = [s for s in stages if s is not None and s.numCompletedTasks > 0]
        assert [s.numCompletedTasks for s in ran] == [executor.commit_partitions], stages  # no shuffle, no re-read
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
