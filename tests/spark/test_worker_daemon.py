"""Reused Python workers skip PySpark's full garbage collection after each task (:mod:`app.spark.daemon`)."""

from __future__ import annotations

import gc
from typing import Any

from app.spark.daemon import SparseCollector


def _collector_of_this_worker(_: Any) -> list[str]:
    import sys

    daemon = sys.modules.get("pyspark.daemon")
    return [type(getattr(daemon, "gc", None)).__name__]


def test_the_workers_of_a_session_come_from_the_daemon_that_collects_sparsely(spark: Any) -> None:
    """Every task's worker was forked by a daemon whose per-task ``gc.collect()`` is a SparseCollector's."""
    seen = set(spark.sparkContext.parallelize(range(4), 4).mapPartitions(_collector_of_this_worker).collect())
    assert seen == {SparseCollector.__name__}


def test_a_full_collection_every_nth_task_and_the_youngest_generation_otherwise(monkeypatch: Any) -> None:
    calls: list[int] = []
    def collect(generation: int = 2) -> int:
        calls.append(generation)
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    collector = SparseCollector(every=3)
    for _ in range(7):
        collector.collect()
    assert calls == [0, 0, 2, 0, 0, 2, 0]
    assert collector.isenabled is gc.isenabled  # anything else is the gc module's
