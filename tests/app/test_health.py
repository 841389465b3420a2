"""Health tells the truth: each pipeline's state in /readyz and trident_pipeline_state, and the exit code."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from app.config import compile_pipeline, loads
from app.failures.policy import BAD_INPUT, FAILED
from app.metrics import PIPELINE_STATES, Metrics
from app.service.health import PipelineState, assess
from app.service.process import Service
from app.service.runner import PipelineRunner
from app.topology.batch import Batch, CommitStats
from spouts.errors import PartitionUnavailableError
from spouts.kafka import POOL
from spouts.kafka.mock_cluster import MockKafkaCluster
from spouts.metadata import Partition
from states.errors import SchemaMismatchError
from states.spec import StateKind
from tests.kafka.helpers import produce, spread


class TestAssess:
    def test_ready_only_when_active(self) -> None:
        base: dict[str, Any] = {"active": True, "error": None, "failing": None, "source_problem": None, "progress_age_s": 1.0,
                                    "window_s": 60.0, "now": 1000.0}
        assert assess(**base).ready
        cases: dict[str, dict[str, Any]] = {
            "failed": {"error": "DataLossError: ..."},
            "standby": {"active": False},
            "degraded": {"failing": ("PartitionUnavailableError: broker down", 990.0)},
        }
        for state, change in cases.items():
            h = assess(**{**base, **change})
            assert h.state.value == state
            assert not h.ready
        h = assess(**{**base, "failing": ("broker down", 990.0)})
        assert (h.reason, h.since) == ("broker down", 990.0)
        h = assess(**{**base, "source_problem": "topic 'wrods' not found"})
        assert h.state is PipelineState.DEGRADED
        assert "wrods" in (h.reason or "")
        h = assess(**{**base, "progress_age_s": 90.0})
        assert h.state is PipelineState.DEGRADED
        assert h.since == 910.0

    def test_the_state_gauge_has_one_series_per_state(self) -> None:
        m = Metrics(CollectorRegistry())
        m.set_pipeline_state("p", "degraded")
        assert {s: m.value("trident_pipeline_state", pipeline="p", state=s) for s in PIPELINE_STATES} == \
            {"standby": 0, "active": 0, "degraded": 1, "failed": 0}
        assert set(PIPELINE_STATES) == {s.value for s in PipelineState}


class ScriptedExecutor:
    """Processes nothing: raises the next scripted error, or succeeds with an empty result once they run out."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors

    def state_kinds(self) -> list[StateKind]:
        return [StateKind.OPAQUE]

    def process(self, batch: Batch) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        return None

    def commit(self, batch: Batch, processed: Any) -> CommitStats:
        return CommitStats()

    def cancel(self, txid: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def cluster() -> Iterator[MockKafkaCluster]:
    with MockKafkaCluster(1) as c:
        c.create_topic("words", 1, 1)
        produce(c.bootstrap_servers(), "words", spread(5, 1))
        yield c
        POOL.close_all(c.bootstrap_servers())


def runner_for(cluster: MockKafkaCluster, tmp_path: Path, executor: ScriptedExecutor, topic: str = "words",
               ) -> tuple[PipelineRunner, Metrics]:
    doc = {
        "kafka": {"bootstrap_servers": cluster.bootstrap_servers(), "request_timeout_s": 2},
        "pipelines": [{"id": "p1", "spout": {"topics": [topic], "first_poll": "earliest"},
                       "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                       "group_by": ["word"], "aggregates": [{"count": {"as": "n"}}],
                       "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"},
                       "idle_sleep_s": 0.05}],
    }
    config = loads(yaml.safe_dump(doc))
    metrics = Metrics(CollectorRegistry())
    return PipelineRunner(compile_pipeline(config, config.pipelines[0], metrics=metrics), executor,
                          metrics=metrics), metrics


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.02)


class TestRunnerHealth:
    def test_a_transient_failure_is_degraded_with_reason_and_since_then_active(
            self, cluster: MockKafkaCluster, tmp_path: Path) -> None:
        outage = [PartitionUnavailableError(Partition("words", 0), "broker down")] * 3
        runner, metrics = runner_for(cluster, tmp_path, ScriptedExecutor(list(outage)))
        assert metrics.value("trident_pipeline_state", pipeline="p1", state="standby") == 1
        stop, fatal = threading.Event(), threading.Event()
        seen: list[dict[str, Any]] = []
        runner.start(stop, fatal.set)
        def degraded_by_the_broker() -> bool:
            seen.append(runner.status(60.0))
            return seen[-1]["state"] == "degraded" and "broker down" in (seen[-1]["reason"] or "")

        try:
            wait_for(degraded_by_the_broker)
            assert not seen[-1]["ready"]
            assert seen[-1]["since"] is not None
            assert seen[-1]["error"] is None
            wait_for(lambda: runner.status(60.0)["state"] == "active")
            assert runner.status(60.0)["ready"]
            assert metrics.value("trident_pipeline_state", pipeline="p1", state="active") == 1
            assert metrics.value("trident_pipeline_state", pipeline="p1", state="degraded") == 0
        finally:
            stop.set()
            runner.thread.join(10)
        assert not fatal.is_set()
        assert runner.exit_code == 0

    def test_a_permanent_failure_stops_the_pipeline_failed_with_its_exit_code(
            self, cluster: MockKafkaCluster, tmp_path: Path) -> None:
        wrong = SchemaMismatchError("table t has columns (a, b), expected (key, n)")
        runner, metrics = runner_for(cluster, tmp_path, ScriptedExecutor([wrong]))
        stop, fatal = threading.Event(), threading.Event()
        runner.start(stop, fatal.set)
        assert fatal.wait(20)
        assert runner.loop_done.wait(10)
        status = runner.status(60.0)
        assert status["state"] == "failed"
        assert not status["ready"]
        assert "table t has columns" in status["error"]
        assert runner.exit_code == BAD_INPUT
        assert metrics.value("trident_pipeline_state", pipeline="p1", state="failed") == 1

    def test_a_missing_topic_is_degraded_not_ready(self, cluster: MockKafkaCluster, tmp_path: Path) -> None:
        runner, _ = runner_for(cluster, tmp_path, ScriptedExecutor([]), topic="wrods")
        stop, fatal = threading.Event(), threading.Event()
        runner.start(stop, fatal.set)
        try:
            wait_for(lambda: runner.last_progress is not None)  # idle steps: nothing to read
            status = runner.status(60.0)
            assert status["state"] == "degraded"
            assert not status["ready"]
            assert "'wrods'" in status["reason"]
            assert status["since"] is not None
            assert status["since"] <= time.time()
            time.sleep(0.1)
            assert runner.status(60.0)["since"] == status["since"]  # since the problem was first seen
        finally:
            stop.set()
            runner.thread.join(10)


def test_an_http_port_in_use_is_one_line_and_the_start_up_exit_code(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        doc = {"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "http": {"host": "127.0.0.1", "port": port},
               "pipelines": [{"id": "p1", "spout": {"topics": ["t"]}, "group_by": ["word"],
                              "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                              "aggregates": [{"count": {"as": "n"}}],
                              "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"}}]}
        service = Service(loads(yaml.safe_dump(doc)), metrics=Metrics(CollectorRegistry()))
        service._install_signals = lambda: None  # type: ignore[method-assign]  # keep pytest's handlers
        assert service.run() == BAD_INPUT != FAILED
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1
    assert errors[0].exc_info is None
    assert f"http.port {port}" in errors[0].getMessage()


class HangingExecutor(ScriptedExecutor):
    """Its first txid never finishes until released: a hung coordinator that still holds its lease."""

    def __init__(self) -> None:
        super().__init__([])
        self.entered, self.release = threading.Event(), threading.Event()

    def process(self, batch: Batch) -> Any:
        self.entered.set()
        self.release.wait(30)
        return None


def _get(port: int, path: str) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_healthz_fails_when_a_leased_pipeline_makes_no_step_for_longer_than_the_live_window(
        cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """A coordinator stuck in a txid while it holds its lease: /healthz turns 503 (naming the pipeline)
    once no step finished for ``service.live_window_s``, and 200 again when steps resume."""
    from app.service.endpoints import HttpServer

    executor = HangingExecutor()
    runner, metrics = runner_for(cluster, tmp_path, executor)
    doc = {"kafka": {"bootstrap_servers": cluster.bootstrap_servers()}, "service": {"live_window_s": 0.5},
           "pipelines": [{"id": "p1", "spout": {"topics": ["words"]}, "group_by": ["word"],
                          "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                          "aggregates": [{"count": {"as": "n"}}],
                          "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"}}]}
    service = Service(loads(yaml.safe_dump(doc)), metrics=metrics)
    service.runners.append(runner)
    server = HttpServer("127.0.0.1", 0, service.readiness, metrics.registry, liveness=service.liveness).start()
    stop, fatal = threading.Event(), threading.Event()
    try:
        assert _get(server.port, "/healthz")[0] == 200  # no lease yet: nothing can be hung
        runner.start(stop, fatal.set)
        assert executor.entered.wait(20)
        assert _get(server.port, "/healthz")[0] == 200  # within the window
        time.sleep(0.7)
        status, body = _get(server.port, "/healthz")
        assert status == 503, body
        assert b'"hung": [\n  "p1"\n ]' in body, body
        executor.release.set()
        wait_for(lambda: _get(server.port, "/healthz")[0] == 200)
    finally:
        stop.set()
        executor.release.set()
        runner.thread.join(10)
        server.close()
    assert not fatal.is_set()


def test_healthz_without_a_liveness_check_answers_while_the_process_serves() -> None:
    from app.service.endpoints import HttpServer

    server = HttpServer("127.0.0.1", 0, lambda: (False, {})).start()
    try:
        assert _get(server.port, "/healthz") == (200, b"ok\n")
        assert _get(server.port, "/readyz")[0] == 503
    finally:
        server.close()
