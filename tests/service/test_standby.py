"""Two real service processes on one pipeline: one active, one standby; SIGKILL the active one and the
standby takes over within the lease TTL plus one batch; every stored count equals the ground truth."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service.helpers import SentenceProducer, ServiceProcess, free_port, lease_row, word_count_config, word_counts

TTL = 10.0
PIPELINE = "kill-test"


def with_lease_ttl(config: Path, ttl: float) -> Path:
    doc = yaml.safe_load(config.read_text())
    doc["pipelines"][0]["lease_ttl_s"] = ttl
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    return config


def other_port(config: Path, port: int, path: Path) -> Path:
    doc = yaml.safe_load(config.read_text())
    doc["http"]["port"] = port
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def wait_for(what: str, check: object, timeout: float, *alive: ServiceProcess) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        for s in alive:
            s.check_alive()
        assert time.monotonic() < deadline, f"{what} not within {timeout:.0f} s:\n{alive[0].tail() if alive else ''}"
        time.sleep(0.1)


def pipeline_status(service: ServiceProcess) -> dict[str, object]:
    try:
        _, body = service.readyz()
    except (OSError, ValueError):
        return {}
    status: dict[str, object] = body.get("pipelines", {}).get(PIPELINE, {})
    return status


def lease_held_metric(service: ServiceProcess) -> float | None:
    _, body = service.get("/metrics")
    m = re.search(rf'^trident_lease_held\{{pipeline="{PIPELINE}"\}} (\S+)$', body.decode(), re.MULTILINE)
    return None if m is None else float(m.group(1))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_standby_takes_over_after_the_active_instance_is_killed(kafka: MockKafkaCluster, tmp_path: Path) -> None:
    """The standby waits not ready and warms up; after the active one's SIGKILL it takes the lease within the TTL,
    its first batch is warm (under half the active instance's cold first batch) and the counts are exact."""
    kafka.create_topic("sentences", 2, 3)
    db, port_a, port_b = tmp_path / "state.db", free_port(), free_port()
    config_a = with_lease_ttl(word_count_config(
        tmp_path / "a.yaml", bootstrap=kafka.bootstrap_servers(), topic="sentences", port=port_a,
        state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"}), TTL)
    config_b = other_port(config_a, port_b, tmp_path / "b.yaml")
    active = ServiceProcess(config_a, tmp_path / "a.log", port_a)
    standby = ServiceProcess(config_b, tmp_path / "b.log", port_b)
    producer = SentenceProducer(kafka.bootstrap_servers(), "sentences", 2, rate=200, seed=7)
    producer.start()
    try:
        active.start().wait_ready(timeout=180)
        standby.start()
        wait_for("standby", lambda: pipeline_status(standby).get("role") == "standby", 180, standby, active)
        status, body = standby.readyz()
        assert status == 503
        assert body["pipelines"][PIPELINE]["lease_held"] is False
        assert lease_held_metric(standby) == 0
        row = lease_row(db, PIPELINE)
        assert row is not None
        assert row[0] is not None
        assert re.search(rf"standby; the lease is held by {re.escape(row[0])} \(epoch \d+\) until", standby.run_log())
        active_owner, active_epoch = row[0], row[1]
        wait_for("a commit by the active instance", lambda: active.commits_this_run() >= 2, 60, active)
        wait_for("the standby's warm-up", lambda: "standby warmed up on txid" in standby.run_log(), 120, standby)

        active.kill()
        killed = time.monotonic()
        wait_for("the standby's takeover", lambda: (lease_row(db, PIPELINE) or (None, 0))[1] > active_epoch, 60,
                 standby)
        took_lease = time.monotonic() - killed
        wait_for("the standby's first commit", lambda: standby.commits_this_run() >= 1, 120, standby)
        took = time.monotonic() - killed
        first = re.search(r"committed txid \d+: .*?, (\d+) ms", standby.run_log())
        assert first is not None
        batch_s = float(first.group(1)) / 1000  # its first batch after the takeover
        cold = re.search(r"committed txid \d+: .*?, (\d+) ms", active.run_log())
        assert cold is not None  # the active instance's first batch: Spark's Python workers started cold
        assert batch_s < 0.5 * int(cold.group(1)) / 1000, "the standby's first batch was not warm"
        assert took_lease <= TTL + 1.5, f"took the lease {took_lease:.1f} s after the kill"
        assert took <= TTL + batch_s + 2.0, f"first commit {took:.1f} s after the kill (batch {batch_s:.1f} s)"
        row = lease_row(db, PIPELINE)
        assert row is not None
        assert row[0] != active_owner
        assert row[1] == active_epoch + 1
        assert standby.readyz()[0] == 200
        assert lease_held_metric(standby) == 1

        truth = producer.stop()
        wait_for("the drain", lambda: word_counts(db) == dict(truth), 120, standby)
        assert standby.terminate() == 0
        assert "stopped in standby" not in standby.run_log()
        print(f"lease taken {took_lease:.1f} s and first commit {took:.1f} s after the SIGKILL (TTL {TTL:g} s, "
              f"its first batch {batch_s:.1f} s, the active instance's cold first batch {int(cold.group(1)) / 1000:.1f} s); "
              f"{sum(truth.values())} words")
        assert word_counts(db) == dict(truth)
    finally:
        active.cleanup()
        standby.cleanup()
        if producer.is_alive():
            producer.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_batches_longer_than_three_lease_ttls_commit_without_losing_the_lease(kafka: MockKafkaCluster,
                                                                             tmp_path: Path) -> None:
    """Each record sleeps 300 ms in Spark (25 per partition and batch: 7.5 s a batch, TTL 2 s): the
    heartbeat keeps renewing while the batch runs, every txid commits, the counts equal the truth."""
    ttl = 2.0
    kafka.create_topic("slow", 2, 3)
    db, port = tmp_path / "state.db", free_port()
    config = with_lease_ttl(word_count_config(
        tmp_path / "slow.yaml", bootstrap=kafka.bootstrap_servers(), topic="slow", port=port,
        state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"}, caps=(25, 50), max_pending=1),
        ttl)
    doc = yaml.safe_load(config.read_text())
    doc["pipelines"][0]["transforms"].insert(0, {"filter": "reflect('java.lang.Thread', 'sleep', CAST(300 AS BIGINT)) "
                                                           "= 'null'"})
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    producer = SentenceProducer(kafka.bootstrap_servers(), "slow", 2, seed=3)
    for _ in range(150):
        producer.produce_one()
    truth = producer.stop()
    service = ServiceProcess(config, tmp_path / "slow.log", port)
    try:
        service.start()
        wait_for("the drain", lambda: word_counts(db) == dict(truth), 420, service)
        wait_for("the last commit's log line", lambda: service.commits_this_run() >= 3, 30, service)
        batches_ms = [float(ms) for ms in re.findall(r"committed txid \d+: .*?, (\d+) ms", service.run_log())]
        assert len(batches_ms) >= 3, batches_ms
        assert sum(ms >= 3 * ttl * 1000 for ms in batches_ms) >= 3, batches_ms
        assert "LeaseLostError" not in service.run_log()
        assert service.terminate() == 0
        print(f"batches of {[round(ms / 1000, 1) for ms in batches_ms]} s with a {ttl:g} s lease TTL")
    finally:
        service.cleanup()
