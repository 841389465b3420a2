"""Rewind with --reset-state, then the real service (``python -m app run``, Spark) recounts exactly the records
from the rewind point on. The mock Kafka cannot look up times, so the point is named with ``offsets:``
here; ``test_rewind.py`` runs the timestamp form on a real Kafka."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.commands.helpers import cli, run_pipeline, words_of
from tests.kafka.fixtures import unique_topic
from tests.kafka.helpers import produce
from tests.service.helpers import ServiceProcess, free_port, word_count_config, word_counts

pytestmark = pytest.mark.slow


def test_service_recounts_after_rewind_with_reset(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    topic = unique_topic("rws")
    kafka_cluster.create_topic(topic, 2)
    bootstrap = kafka_cluster.bootstrap_servers()
    db, port = tmp_path / "state.db", free_port()
    config = word_count_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, port=port,
                               state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"})
    a = produce(bootstrap, topic, [(i % 2, f"alpha w{i % 4}".encode()) for i in range(60)])
    b = produce(bootstrap, topic, [(i % 2, f"bravo w{i % 3}".encode()) for i in range(45)])
    run_pipeline(config, "kill-test")
    assert word_counts(db) == words_of([r.value for r in a + b])

    starts = {p: min(r.offset for r in b if r.partition == p) for p in (0, 1)}
    to = "offsets:" + ",".join(f"{topic}:{p}={o}" for p, o in sorted(starts.items()))
    r = cli("rewind", "--config", str(config), "--pipeline", "kill-test", "--to", to, "--reset-state", "--yes-i-know")
    assert r.code == 0, r.err
    assert word_counts(db) == {}

    service = ServiceProcess(config, tmp_path / "service.log", port).start()
    try:
        service.wait_ready(180)
        expected = dict(words_of([r.value for r in b]))
        deadline = time.monotonic() + 120
        while word_counts(db) != expected and time.monotonic() < deadline:
            service.check_alive()
            time.sleep(0.2)
        assert word_counts(db) == expected, service.tail()
        assert service.terminate() == 0
    finally:
        service.cleanup()
