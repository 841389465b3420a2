"""Read and commit tasks and shuffle partitions follow the executors, chosen again before every txid."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.spark import SparkExecutor, parallelism
from app.spark.parallelism import ExecutorCounts, Parallelism, choose, observe
from app.topology.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.helpers import Topic, coordinator, expected_words, lines, sqlite_table, word_counts


def test_a_cluster_of_4_cores_gets_4_of_each_and_never_spark_s_200() -> None:
    assert choose(ExecutorCounts(4, 4, 2), None) == Parallelism(4, 4, 4)


def test_counts_given_and_the_user_s_shuffle_partitions_are_kept() -> None:
    assert choose(ExecutorCounts(4, 4, 2), None, read_tasks=3, commit_partitions=8, keep_shuffle=True) == Parallelism(3, 8, None)


def test_spark_default_parallelism_sizes_the_commits_and_the_cores_the_reads() -> None:
    """``local[2]`` with ``spark.default.parallelism`` 4: two reads at once, four commit partitions."""
    assert choose(ExecutorCounts(2, 4, 1), None) == Parallelism(2, 4, 4)


def test_executors_that_register_later_change_the_counts() -> None:
    first = choose(ExecutorCounts(2, 2, 0), None)  # none registered yet: Spark's default parallelism (2 on standalone)
    assert first == Parallelism(2, 2, 2)
    assert choose(ExecutorCounts(4, 4, 2), first) == Parallelism(4, 4, 4)
    assert choose(ExecutorCounts(1, 1, 1), Parallelism(4, 4, 4)) == Parallelism(1, 1, 1)  # a worker lost: fewer


def test_no_executor_keeps_the_previous_counts() -> None:
    """All executors lost: the counts stay (keys keep their commit partitions until executors return)."""
    before = Parallelism(4, 4, 4)
    assert choose(ExecutorCounts(2, 2, 0), before) is before


@pytest.mark.parametrize(("master", "seen"), [("local[3,4]", ExecutorCounts(3, 7, 1)), ("spark://h:7077", ExecutorCounts(7, 7, 2))])
def test_observe_reads_threads_or_the_registered_executors(master: str, seen: ExecutorCounts) -> None:
    ids = SimpleNamespace(size=lambda: 2)
    jsc = SimpleNamespace(sc=lambda: SimpleNamespace(getExecutorIds=lambda: ids))
    context = SimpleNamespace(master=master, defaultParallelism=7, _jsc=jsc)
    assert observe(SimpleNamespace(sparkContext=context)) == seen


def test_local_mode_follows_the_cores_between_txids(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Cores seen going from 2 to 3 after the first txid (and shuffle partitions left to the service): the
    start-up log names the choice, the change is logged, later txids commit in 3 tasks with 3 shuffle
    partitions, and the counts still equal the truth."""
    seen = [ExecutorCounts(2, 2, 1)]
    monkeypatch.setattr(parallelism, "observe", lambda _spark: seen[0])
    monkeypatch.setattr(parallelism, "user_shuffle_partitions", lambda _spark: False)
    original = spark.conf.get(parallelism.SHUFFLE_PARTITIONS)
    topic = Topic(spark_kafka)
    topic.produce(300, seed=11)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("follows-cores")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    caplog.set_level(logging.INFO, logger="app.spark.batch_executor")
    try:
        executor = SparkExecutor(spark, topology, driver_keys=0)  # commit tasks, even of small results
        executor.reads.records_per_task = 1  # a read task per core: the result is shuffled into every commit partition
        assert "parallelism 2 read tasks, 2 commit tasks per keyed sink, 2 shuffle partitions" in caplog.text
        coord = coordinator(topology, executor, factory.txstate_store(topology.name),
                            caps=Caps(per_partition=40, per_batch=100))
        try:
            assert coord.run_until_idle(max_batches=1) == 1
            seen[0] = ExecutorCounts(3, 3, 1)
            assert coord.run_until_idle() == 2
        finally:
            coord.close()
        assert "the executors changed, parallelism now 3 read tasks, 3 commit tasks" in caplog.text
        assert spark.conf.get(parallelism.SHUFFLE_PARTITIONS) == "3"
        tracker = spark.sparkContext.statusTracker()
        commit_tasks = []
        for txid in (1, 2, 3):
            jobs = sorted(tracker.getJobIdsForGroup(f"{topology.name}:txid-{txid}"))
            commit = tracker.getJobInfo(jobs[-1])
            assert commit is not None
            stages = [tracker.getStageInfo(s) for s in commit.stageIds]
            commit_tasks.append([s.numCompletedTasks for s in stages if s is not None and s.numCompletedTasks > 0])
        assert commit_tasks == [[2], [3], [3]]
    finally:
        spark.conf.set(parallelism.SHUFFLE_PARTITIONS, original)
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
