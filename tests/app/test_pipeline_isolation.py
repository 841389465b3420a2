"""Pipelines fail independently: a permanent failure stops its own pipeline (``failed``, named by
``/readyz``, counted by reason), the others go on, and ``service.on_pipeline_failure`` decides
when the process exits. The service runs in-process on scripted executors (no Spark)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest
import yaml
from prometheus_client import CollectorRegistry

from app.config import loads
from app.failures import spark_fatal as fatal
from app.failures.errors import BadRecordsGoneError, MissingBatchMetadataError
from app.failures.policy import BAD_INPUT, FAILED
from app.metrics import Metrics
from app.service.process import Service
from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from states.errors import (
    CommitProtocolError,
    InvalidIdentifierError,
    LeaseLostError,
    LeaseNotRenewedError,
    SchemaMismatchError,
)
from tests.app.test_health import ScriptedExecutor, wait_for
from tests.kafka.helpers import produce, spread


class FakeSpark:
    """What the service calls on its Spark session while stopping."""

    class _Context:
        def cancelAllJobs(self) -> None:
            pass

    def __init__(self) -> None:
        self.sparkContext = self._Context()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockKafkaCluster]:
    with MockKafkaCluster(1) as c:
        for topic in ("a", "b"):
            c.create_topic(topic, 1, 1)
            produce(c.bootstrap_servers(), topic, spread(5, 1))
        yield c
        POOL.close_all(c.bootstrap_servers())


class RunningService:
    """A :class:`Service` of pipelines ``a`` and ``b`` (topics of the same names) run in a thread."""

    def __init__(self, cluster: MockKafkaCluster, tmp_path: Path, errors: dict[str, list[BaseException]],
                 policy: str | None = None, **service: Any) -> None:
        pipelines = [{"id": p, "spout": {"topics": [p], "first_poll": "earliest"},
                      "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                      "group_by": ["word"], "aggregates": [{"count": {"as": "n"}}],
                      "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / f"{p}.db"), "table": "t"},
                      "idle_sleep_s": 0.05} for p in ("a", "b")]
        doc: dict[str, Any] = {"kafka": {"bootstrap_servers": cluster.bootstrap_servers(), "request_timeout_s": 2},
                               "http": {"enabled": False}, "service": {"shutdown_grace_s": 5},
                               "pipelines": pipelines}
        if policy is not None:
            doc["service"]["on_pipeline_failure"] = policy
        doc["service"].update(service)
        self.metrics = Metrics(CollectorRegistry())
        executors = [ScriptedExecutor(list(errors.get(p, []))) for p in ("a", "b")]
        self.service = Service(loads(yaml.safe_dump(doc)), metrics=self.metrics,
                               executor_factory=lambda spark, topology: executors.pop(0))
        self.spark = FakeSpark()
        self.service._start_spark = self._fake_spark  # type: ignore[method-assign]
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _fake_spark(self) -> None:
        self.service.spark = self.spark  # type: ignore[assignment]

    def _run(self) -> None:
        self.exit_code = self.service.run()

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.stop.set()
        self.thread.join(30)

    def runner(self, pipeline: str) -> Any:
        wait_for(lambda: len(self.service.runners) == 2)
        return next(r for r in self.service.runners if r.id == pipeline)

    def state(self, pipeline: str) -> str:
        self.runner(pipeline)  # the pipelines are compiled once the (fake) Spark is up
        return str(self.service.readiness()[1]["pipelines"][pipeline]["state"])


def test_a_lost_lease_stops_its_pipeline_only_and_the_other_goes_on(
        cluster: MockKafkaCluster, tmp_path: Path) -> None:
    lost = LeaseLostError("a", 1, 2)
    with RunningService(cluster, tmp_path, {"a": [lost]}) as running:
        wait_for(running.runner("a").loop_done.is_set)
        b = running.runner("b")
        wait_for(lambda: running.state("b") == "active")
        ready, body = running.service.readiness()
        assert not ready
        assert body["failed"] == ["a"]
        assert body["pipelines"]["a"]["state"] == "failed"
        assert "LeaseLostError" in body["pipelines"]["a"]["error"]
        assert body["pipelines"]["b"]["ready"]
        assert body["pipelines"]["b"]["error"] is None
        # b still commits what arrives after a stopped
        before = b.coordinator.committed_txid
        produce(cluster.bootstrap_servers(), "b", spread(5, 1, tag="late"))
        wait_for(lambda: b.coordinator.committed_txid > before)
        assert running.thread.is_alive()
        assert not running.service.stop.is_set()
        m = running.metrics
        assert m.value("trident_pipeline_failures_total", pipeline="a", reason="lease_lost") == 1
        assert m.value("trident_pipeline_state", pipeline="a", state="failed") == 1
        assert m.value("trident_pipeline_failures_total", pipeline="b", reason="lease_lost") == 0
        assert m.registry.get_sample_value("trident_pipeline_failures_total",
                                           {"pipeline": "b", "reason": "unexpected"}) == 0  # precreated
        running.service.stop.set()  # a signal: the exit code still says a pipeline failed
        running.thread.join(30)
    assert running.exit_code == FAILED
    assert running.spark.stopped


def test_a_lease_the_store_did_not_renew_steps_down_and_takes_it_again_without_a_restart(
        cluster: MockKafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A lease lost because the store did not answer (two replicas of three down) is no permanent failure: the
    pipeline drops what it held, contends for the lease again, and commits on under a new epoch."""
    not_renewed = LeaseNotRenewedError("a", 1, reason="no renewal succeeded for 24.0 s of its 30 s TTL (the last "
                                                      "attempt has not answered); stopping before it could expire")
    with RunningService(cluster, tmp_path, {"a": [not_renewed]}) as running:
        wait_for(lambda: running.runner("a").coordinator.epoch == 2)
        a = running.runner("a")
        before = a.coordinator.committed_txid
        produce(cluster.bootstrap_servers(), "a", spread(5, 1, tag="after"))
        wait_for(lambda: a.coordinator.committed_txid > before)
        assert running.state("a") == "active"
        assert a.error is None
        assert running.metrics.value("trident_pipeline_failures_total", pipeline="a", reason="lease_lost") == 0
        running.service.stop.set()
        running.thread.join(30)
    assert running.exit_code == 0
    assert "pipeline a stepped down: the lease could not be renewed (no renewal succeeded" in caplog.text


def test_the_process_exits_once_every_pipeline_has_stopped_with_the_highest_code(
        cluster: MockKafkaCluster, tmp_path: Path) -> None:
    errors: dict[str, list[BaseException]] = {"a": [LeaseLostError("a", 1, 2)],
                                              "b": [SchemaMismatchError("table t has columns (x), expected (word, n)")]}
    with RunningService(cluster, tmp_path, errors) as running:
        running.thread.join(30)
        assert not running.thread.is_alive()
    assert running.exit_code == BAD_INPUT  # the configuration error's 2 wins over the lost lease's 1
    assert running.metrics.value("trident_pipeline_failures_total", pipeline="b", reason="configuration") == 1


@pytest.mark.parametrize(("error", "code", "reason"), [
    (fatal.decode(fatal.encode(SchemaMismatchError("table t has columns (x), expected (word, n)"))), BAD_INPUT,
     "configuration"),
    (fatal.decode(fatal.encode(InvalidIdentifierError("invalid table name 'select'"))), BAD_INPUT, "configuration"),
    (fatal.decode(fatal.encode(CommitProtocolError("multi_update outside begin_commit/commit"))), FAILED,
     "unexpected"),
    (MissingBatchMetadataError(7), FAILED, "unexpected"),
    (BadRecordsGoneError(["a[0]@3"]), FAILED, "data_loss"),
], ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v))
def test_each_permanent_error_stops_its_pipeline_at_once_by_its_type(
        cluster: MockKafkaCluster, tmp_path: Path, error: BaseException, code: int, reason: str) -> None:
    """Permanent by type (state errors as they come back from a Spark task, carried as data): the first
    attempt stops the pipeline, /readyz names the error, the exit code and failure reason follow the class."""
    with RunningService(cluster, tmp_path, {"a": [error]}, policy="exit") as running:
        running.thread.join(30)
        assert not running.thread.is_alive()
        body = running.service.readiness()[1]
        assert body["failed"] == ["a"]
        assert type(error).__name__ in body["pipelines"]["a"]["error"]
    assert running.exit_code == code
    assert running.metrics.value("trident_pipeline_failures_total", pipeline="a", reason=reason) == 1


def test_on_pipeline_failure_exit_stops_every_pipeline(cluster: MockKafkaCluster, tmp_path: Path) -> None:
    with RunningService(cluster, tmp_path, {"a": [LeaseLostError("a", 1, 2)]}, policy="exit") as running:
        running.thread.join(30)
        assert not running.thread.is_alive()
        assert running.runner("b").loop_done.is_set()
        assert running.runner("b").error is None
    assert running.exit_code == FAILED


def test_without_failures_a_signal_exits_0(cluster: MockKafkaCluster, tmp_path: Path) -> None:
    with RunningService(cluster, tmp_path, {}) as running:
        wait_for(lambda: running.state("a") == "active" and running.state("b") == "active")
        ready, body = running.service.readiness()
        assert ready
        assert body["failed"] == []
    assert running.exit_code == 0


def test_the_policy_defaults_to_isolate_and_refuses_unknown_values() -> None:
    base = ("kafka: {bootstrap_servers: 'k:9092'}\n"
            "pipelines: [{id: p, spout: {topics: [t]}, group_by: [w], transforms: [{map: ['CAST(value AS STRING) AS w']}],"
            " aggregates: [{count: {as: n}}], state: {backend: sqlite, table: t}}]\n")
    assert loads(base).service.on_pipeline_failure == "isolate"
    assert loads(base + "service: {on_pipeline_failure: EXIT}\n").service.on_pipeline_failure == "exit"
    with pytest.raises(Exception, match="on_pipeline_failure"):
        loads(base + "service: {on_pipeline_failure: restart}\n")


@pytest.mark.parametrize("standby_ready", [True, False])
def test_a_standby_is_ready_only_when_standby_ready_says_so(cluster: MockKafkaCluster, tmp_path: Path,
                                                            standby_ready: bool) -> None:
    """A second process on the same state waits as standby for both pipelines; with
    ``service.standby_ready`` its /readyz is 200 (a rolling update may go on), else 503."""
    with RunningService(cluster, tmp_path, {}) as active:
        wait_for(lambda: active.state("a") == "active" and active.state("b") == "active")
        with RunningService(cluster, tmp_path, {}, standby_ready=standby_ready) as standby:
            wait_for(lambda: standby.state("a") == "standby" and standby.state("b") == "standby")
            ready, body = standby.service.readiness()
            assert ready is standby_ready
            assert body["failed"] == []
            assert active.service.readiness()[0]
