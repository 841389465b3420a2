"""``python -m app run`` as a real process: endpoints, SIGTERM (exit 0, lease released, resume at the next txid)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest
import yaml

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service.helpers import (
    SentenceProducer,
    ServiceProcess,
    committed_txid,
    free_port,
    lease_row,
    word_count_config,
    word_counts,
)

CANARY = "s3cret-canary-9f2"


def wait_for_counts(db: Path, expected: dict[str, int], service: ServiceProcess, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        service.check_alive()
        if word_counts(db) == expected:
            return
        time.sleep(0.3)
    raise AssertionError(f"counts never matched: {word_counts(db)} != {expected}\n{service.tail()}")


def add_sentence_total_pipeline(config: Path, db: Path) -> None:
    """A second pipeline in the same service: a global count of sentences (one row) with its own id and lease."""
    doc = yaml.safe_load(config.read_text())
    doc["pipelines"].append({"id": "sentence-total", "spout": {"topics": ["words"], "first_poll": "earliest"},
                             "aggregates": [{"count": {"as": "sentences"}}],
                             "state": {"sqlite_path": str(db), "table": "sentence_total"}})
    config.write_text(yaml.safe_dump(doc, sort_keys=False))


def sentence_total(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        try:
            row = conn.execute("SELECT sentences FROM sentence_total").fetchone()
        except sqlite3.OperationalError:
            return 0
        return 0 if row is None else int(row[0])


def wait_for_total(db: Path, expected: int, service: ServiceProcess, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while sentence_total(db) != expected:
        service.check_alive()
        assert time.monotonic() < deadline, f"sentence total {sentence_total(db)} != {expected}\n{service.tail()}"
        time.sleep(0.3)


def wait_for_metric(service: ServiceProcess, sample: str, timeout: float = 30) -> str:
    """The /metrics text once it contains ``sample`` (the state is written before the txid's metrics)."""
    deadline = time.monotonic() + timeout
    while True:
        text = service.get("/metrics")[1].decode()
        if sample in text or time.monotonic() > deadline:
            assert sample in text, text
            return text
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigterm_exits_zero_releases_the_lease_and_the_next_run_resumes(kafka: MockKafkaCluster,
                                                                         tmp_path: Path) -> None:
    """SIGTERM ends a run with exit 0 and the lease released; a restart resumes at the next txid and
    counts only the new records; the endpoints answer while it runs and no secret reaches the log."""
    kafka.create_topic("words", 3, 3)
    db, port, log = tmp_path / "state.db", free_port(), tmp_path / "service.log"
    config = word_count_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic="words",
                               port=port, state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"})
    add_sentence_total_pipeline(config, db)
    producer = SentenceProducer(kafka.bootstrap_servers(), "words", 3)
    for _ in range(1500):
        producer.produce_one()
    service = ServiceProcess(config, log, port, env={"TRIDENT_KAFKA_SASL_PASSWORD": CANARY})
    try:
        truth = producer.stop()
        service.start()
        wait_for_counts(db, dict(truth), service)
        wait_for_total(db, 1500, service)
        ready = service.wait_ready()
        assert ready["pipelines"]["kill-test"]["lease_held"] is True
        assert ready["pipelines"]["sentence-total"]["lease_held"] is True
        assert service.get("/healthz")[0] == 200
        metrics = wait_for_metric(service, 'trident_records_total{pipeline="kill-test"} 1500.0')
        assert 'trident_lease_held{pipeline="kill-test"} 1.0' in metrics
        assert re.search(r'trident_batches_total\{outcome="committed",pipeline="kill-test"\} [1-9]', metrics)
        assert 'trident_partition_lag{partition="0",pipeline="kill-test",topic="words"} 0.0' in metrics

        assert service.terminate() == 0
        assert word_counts(db) == dict(truth)
        assert sentence_total(db) == 1500  # nothing counted late, while stopping
        first = committed_txid(db, "kill-test")
        row = lease_row(db, "kill-test")
        assert row is not None
        owner, _, expires = row
        assert owner is None
        assert expires == 0  # released: a successor starts at once

        more = SentenceProducer(kafka.bootstrap_servers(), "words", 3, seed=2)
        for _ in range(600):
            more.produce_one()
        truth += more.stop()
        service.start()
        wait_for_counts(db, dict(truth), service)
        wait_for_total(db, 2100, service)
        assert service.terminate() == 0
    finally:
        service.cleanup()
    assert word_counts(db) == dict(truth)  # re-read after the exit: a late double count would show here
    assert sentence_total(db) == 2100  # the second pipeline, in its own thread on the same Spark
    text = log.read_text()
    assert f"resuming after txid {first}" in text
    assert f"committed txid {first + 1}:" in text
    assert re.search(r"committed txid 1: \d+ records \(\d+ counted, 0 skipped, 0 dead-lettered\), \d+ keys, \d+ ms", text)
    assert CANARY not in text
    assert text.count("stopped") >= 2


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_lease_held_by_another_owner_makes_the_service_a_standby_until_it_is_released(
        kafka: MockKafkaCluster, tmp_path: Path) -> None:
    """A second service (another owner) waits while the pipeline's lease is held: alive, not ready,
    ``role: standby``, the holder's lease left alone; it takes over as soon as the holder releases."""
    from states.sqlite import SqliteTransactionalStateStore

    kafka.create_topic("words", 1, 1)
    db, port, log = tmp_path / "state.db", free_port(), tmp_path / "service.log"
    config = word_count_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic="words",
                               port=port, state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"})
    holder = SqliteTransactionalStateStore(db, "kill-test")
    epoch = holder.acquire_lease("another-pod", 300)
    service = ServiceProcess(config, log, port).start()
    try:
        deadline = time.monotonic() + 180
        while "standby; the lease is held by another-pod (epoch 1) until" not in log.read_text():
            service.check_alive()
            assert time.monotonic() < deadline, service.tail()
            time.sleep(0.2)
        status, body = service.readyz()
        assert status == 503
        assert body["pipelines"]["kill-test"]["role"] == "standby"
        assert (lease_row(db, "kill-test") or ())[:2] == ("another-pod", epoch)
        holder.release_lease("another-pod", epoch)
        service.wait_ready(timeout=60)  # taken over at its next poll (at most 5 s later)
        assert (lease_row(db, "kill-test") or (None, 0))[1] == epoch + 1
        assert service.terminate() == 0
    finally:
        service.cleanup()
    assert "LeaseHeldError" not in log.read_text()
    holder.close()
