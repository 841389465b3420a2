"""The bench's JIT warm-ups: windows of new pipelines over one topic, and a pass at the measured caps; each checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.planner import Caps
from states.factory import StateFactory
from tests.bench import runs
from tests.bench.runs import TruthMismatch
from tests.bench.workload import Topic


def test_the_warm_up_runs_its_txids_in_windows_and_reports_the_jit_per_window(
        spark: Any, spark_kafka: MockKafkaCluster, tmp_path: Path) -> None:
    topic = Topic.filled(spark_kafka, "jit-warm-windows", 2 * 100, partitions=2)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "warm.db"))
    before = runs.jit_ms(spark)

    fig = runs.jit_warm_up(spark, topic, factory, 6, per_txid=100, window=2)

    assert (fig.txids, fig.records) == (6, 600)  # three windows of two txids, each a pipeline reading the topic anew
    assert runs.jit_ms(spark) >= before
    assert set(fig.extra) == {"cpu_s_per_txid_first", "cpu_s_per_txid_last", "jit_ms_per_txid_first",
                              "jit_ms_per_txid_last"}
    assert all(v >= 0 for v in fig.extra.values())


def test_the_warm_up_fails_when_a_window_counted_wrong(
        spark: Any, spark_kafka: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = Topic.filled(spark_kafka, "jit-warm-wrong", 100, partitions=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "warm.db"))
    monkeypatch.setattr(Topic, "truth", lambda self, *a, **k: {"w0": -1})  # a truth no pipeline can meet

    with pytest.raises(TruthMismatch):
        runs.jit_warm_up(spark, topic, factory, 1, per_txid=100, window=1)


def test_the_size_warm_up_runs_the_whole_topic_at_the_caps_and_checks_it(
        spark: Any, spark_kafka: MockKafkaCluster, tmp_path: Path) -> None:
    topic = Topic.filled(spark_kafka, "jit-warm-size", 600, partitions=2)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "warm.db"))

    fig = runs.size_warm_up(spark, topic, factory, Caps(per_partition=100, per_batch=200))

    assert (fig.txids, fig.records, fig.per_txid) == (3, 600, 200)  # the whole topic, 200 records a txid
    assert set(fig.extra) == {"cpu_s_per_txid", "jit_ms_per_txid"}
    assert fig.extra["cpu_s_per_txid"] > 0


def test_the_size_warm_up_fails_when_it_counted_wrong(
        spark: Any, spark_kafka: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topic = Topic.filled(spark_kafka, "jit-warm-size-wrong", 100, partitions=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "warm.db"))
    monkeypatch.setattr(Topic, "truth", lambda self, *a, **k: {"w0": -1})

    with pytest.raises(TruthMismatch):
        runs.size_warm_up(spark, topic, factory, Caps(per_partition=50, per_batch=50))
