"""No Spark executor for longer than the bound: a reason on /readyz, one log line each way, a gauge."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.spark import executor_watch
from app.spark.executor_watch import ExecutorWatch
from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.app.test_health import ScriptedExecutor, cluster, runner_for, wait_for  # noqa: F401 (fixture)

MASTER = "spark://127.0.0.1:7077"


class FakeCluster:
    """The status source and the clock the watch reads, set by the test."""

    def __init__(self) -> None:
        self.executors: int | None = 2
        self.now = 1000.0

    def count(self) -> int | None:
        return self.executors

    def clock(self) -> float:
        return self.now


def watch(seen: FakeCluster, bound_s: float = 60.0, gauge: object = None) -> ExecutorWatch:
    return ExecutorWatch(seen.count, bound_s, gauge, clock=seen.clock)


def test_executors_gone_longer_than_the_bound_is_a_problem_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    seen = FakeCluster()
    metrics = Metrics(CollectorRegistry())
    w = watch(seen, gauge=metrics.spark_executors.labels(master=MASTER))
    caplog.set_level(logging.INFO, logger="app.spark.executor_watch")
    w.poll()
    assert w.problem is None
    assert metrics.value("trident_spark_executors", master=MASTER) == 2
    seen.executors = 0
    w.poll()
    seen.now += 60.0
    w.poll()
    assert w.problem is None
    assert metrics.value("trident_spark_executors", master=MASTER) == 0  # at the bound: not yet
    seen.now += 1.0
    w.poll()
    w.poll()
    assert w.problem is not None
    assert w.problem.startswith("no Spark executor for 61 s (the bound is 60 s)")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "no Spark executor for 61 s" in errors[0].getMessage()
    seen.executors, seen.now = 1, seen.now + 5
    w.poll()
    assert w.problem is None
    assert metrics.value("trident_spark_executors", master=MASTER) == 1
    assert "Spark executors are back (1) after 66 s" in caplog.text


def test_an_unknown_count_changes_nothing() -> None:
    seen = FakeCluster()
    w = watch(seen, bound_s=10)
    seen.executors = 0
    w.poll()
    seen.executors, seen.now = None, seen.now + 30
    w.poll()
    assert w.problem is not None  # still none seen since the last count


def test_the_bound_is_configurable_and_positive() -> None:
    from app.config import parse
    from tests.service.test_config import doc, error

    assert parse(doc(spark={"executors_gone_s": 15}), {}).spark.executors_gone_s == 15
    assert parse(doc(), {}).spark.executors_gone_s == 60
    assert error(doc(spark={"executors_gone_s": 0})).path == "spark.executors_gone_s"
    with pytest.raises(ValueError):
        ExecutorWatch(lambda: 1, 0)


def test_a_local_master_needs_no_watch() -> None:
    assert executor_watch.watch(SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))) is None


def test_the_gauge_exists_only_on_a_cluster_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """No series on a local master (an alert on 0 executors must not fire there); a cluster master's watch
    publishes its count labelled with the master."""
    metrics = Metrics(CollectorRegistry())
    local = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))
    assert executor_watch.watch(local, gauge=metrics.spark_executors) is None
    assert [s for f in metrics.registry.collect() for s in f.samples if s.name == "trident_spark_executors"] == []
    monkeypatch.setattr(executor_watch, "registered_executors", lambda spark: 0)
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master=MASTER))
    assert executor_watch.watch(spark, gauge=metrics.spark_executors) is not None
    try:
        assert metrics.registry.get_sample_value("trident_spark_executors", {"master": MASTER}) == 0
    finally:
        executor_watch.unwatch(spark)


class WatchedExecutor(ScriptedExecutor):
    """An executor whose hold-up is the watch's problem, as the Spark executor reports it."""

    def __init__(self, w: ExecutorWatch) -> None:
        super().__init__([])
        self.watch = w

    @property
    def problem(self) -> str | None:
        return self.watch.problem


def test_readyz_is_degraded_with_the_reason_until_executors_return(cluster: MockKafkaCluster,  # noqa: F811
                                                                    tmp_path: Path) -> None:
    seen = FakeCluster()
    w = watch(seen)
    runner, metrics = runner_for(cluster, tmp_path, WatchedExecutor(w))
    stop, fatal = threading.Event(), threading.Event()
    runner.start(stop, fatal.set)
    try:
        wait_for(lambda: runner.status(60.0)["state"] == "active")
        seen.executors = 0
        w.poll()
        seen.now += 90
        status = runner.status(60.0)
        assert status["state"] == "degraded", status
        assert not status["ready"], status
        assert status["reason"].startswith("no Spark executor for 90 s"), status
        assert metrics.value("trident_pipeline_state", pipeline="p1", state="degraded") == 1
        seen.executors = 2
        w.poll()
        wait_for(lambda: runner.status(60.0)["state"] == "active")
    finally:
        stop.set()
        runner.thread.join(10)
    assert not fatal.is_set()
