"""A state table is created by the first txid that writes into it, not only by txid 1.

A new pipeline started on an empty topic commits a txid that reads nothing (it stores the positions
it starts from); its tables are created by the first txid with keys, and every count equals the truth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.spark import SparkExecutor
from app.topology.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.spark.helpers import Topic, coordinator, expected_words, lines, sqlite_table, word_counts

CAPS = Caps(per_partition=120, per_batch=300)


def test_a_pipeline_started_before_its_topic_has_records_creates_its_table(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    topic = Topic(spark_kafka)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("first-table")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        coord.run_until_idle()
        assert coord.committed_txid == 1  # the positions it starts from, nothing read
        topic.produce(100, seed=3)
        assert coord.run_until_idle() >= 1
    finally:
        coord.close()
        executor.close()
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
