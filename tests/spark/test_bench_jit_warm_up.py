"""The bench's JIT warm-up: windows of new pipelines over one topic, each checked, the JIT's time reported."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
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
