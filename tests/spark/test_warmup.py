"""A standby's warm-up: the read, aggregation and state sessions of a stored plan, writing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.coordinator.progress import read_progress
from app.spark import SparkExecutor
from app.topology.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.helpers import Topic, coordinator, expected_words, lines, sqlite_table, word_counts


def test_a_warm_up_runs_the_stored_plan_and_opens_the_states_without_writing(spark: Any, spark_kafka: Any,
                                                                           tmp_path: Path) -> None:
    """A second executor (the standby's) warms up on the committed txid's plan: its warm-up job reads and
    aggregates, every commit task opens the state, and the state table and the store are unchanged; the
    active instance then goes on committing exactly."""
    topic = Topic(spark_kafka)
    topic.produce(200, seed=5)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("warm-up")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    store = factory.txstate_store(topology.name)
    active = coordinator(topology, SparkExecutor(spark, topology), store, caps=Caps(per_partition=40, per_batch=100))
    try:
        assert active.run(max_batches=1) == 1
        table = sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"])
        progress = read_progress(store)
        documents = {k: store.get(k) for k in store.keys("")}
        assert progress.committed_plan is not None
        assert progress.committed_plan.record_count > 0

        standby = SparkExecutor(spark, topology)
        assert standby.warm_up(progress.committed_plan.head(10)) == standby.commit_partitions

        tracker = spark.sparkContext.statusTracker()
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup(f"{topology.name}:warm-up")]
        assert jobs, jobs
        assert all(j is not None and j.status == "SUCCEEDED" for j in jobs), jobs
        assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == table
        assert {k: store.get(k) for k in store.keys("")} == documents
        assert standby.reads.counts.value == {}
        assert standby.reads.bad.value == {}  # nothing counted as read

        active.run_until_idle()
    finally:
        active.close()
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
