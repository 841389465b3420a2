"""A Kafka outage shows in /readyz at once (degraded, with since), while a txid still waits on the broker."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from app.config import compile_pipeline, loads, spout_config
from app.metrics import Metrics
from app.service.kafka_watch import KafkaWatch
from app.service.runner import PipelineRunner
from app.topology.batch import Batch, CommitStats
from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from states.spec import StateKind
from tests.kafka.helpers import produce, spread


class StuckExecutor:
    """Processing blocks (as Spark reading from a broker that went away does) until released."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def state_kinds(self) -> list[StateKind]:
        return [StateKind.OPAQUE]

    def process(self, batch: Batch) -> Any:
        self.entered.set()
        self.release.wait(60)
        return None

    def commit(self, batch: Batch, processed: Any) -> CommitStats:
        return CommitStats()

    def cancel(self, txid: int) -> None:
        self.release.set()

    def close(self) -> None:
        self.release.set()


def test_all_brokers_down_is_degraded_with_since_while_a_txid_waits(tmp_path: Path) -> None:
    with MockKafkaCluster(1) as cluster:
        cluster.create_topic("words", 1, 1)
        produce(cluster.bootstrap_servers(), "words", spread(5, 1))
        doc = {"kafka": {"bootstrap_servers": cluster.bootstrap_servers(), "request_timeout_s": 2},
               "pipelines": [{"id": "p1", "spout": {"topics": ["words"], "first_poll": "earliest"},
                              "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                              "group_by": ["word"], "aggregates": [{"count": {"as": "n"}}], "max_pending": 1,
                              "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"}}]}
        config = loads(yaml.safe_dump(doc))
        metrics = Metrics(CollectorRegistry())
        watch = KafkaWatch(spout_config(config, config.pipelines[0]), "p1", interval_s=0.5)
        executor = StuckExecutor()
        runner = PipelineRunner(compile_pipeline(config, config.pipelines[0], metrics=metrics), executor,
                                metrics=metrics, kafka_watch=watch)
        stop, fatal = threading.Event(), threading.Event()
        runner.start(stop, fatal.set)
        try:
            assert executor.entered.wait(20)
            runner.last_progress = time.monotonic()  # within the ready window: only the outage can degrade it
            assert runner.status(60.0)["state"] == "active"
            cluster.broker_down(1)
            down_at = time.time()
            deadline = time.monotonic() + 15
            while (status := runner.status(60.0))["state"] != "degraded":
                assert time.monotonic() < deadline, status
                time.sleep(0.2)
            assert "does not answer" in status["reason"]
            assert not status["ready"]
            assert status["since"] is not None
            assert down_at - 1 <= status["since"] <= time.time()
            cluster.broker_up(1)
            deadline = time.monotonic() + 15
            while runner.status(60.0)["state"] != "active":
                assert time.monotonic() < deadline, runner.status(60.0)
                time.sleep(0.2)
        finally:
            stop.set()
            executor.release.set()
            runner.thread.join(20)
            POOL.close_all(cluster.bootstrap_servers())
