"""``rewind`` onto a topic the cluster does not have is refused (exit 2) and writes nothing."""

from __future__ import annotations

from pathlib import Path

from app.config import compile_pipeline, load
from app.coordinator.progress import read_progress
from tests.commands.helpers import cli, forget_opened, write_config
from tests.kafka.fixtures import MockKafkaCluster, unique_topic


def test_rewind_of_a_missing_topic_is_refused_and_commits_nothing(kafka_cluster: MockKafkaCluster,
                                                                  tmp_path: Path) -> None:
    topic = unique_topic("absent")
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest")
    assert r.code == 2, r.err
    assert topic in r.err, r.err
    assert "does not exist" in r.err, r.err
    forget_opened()
    assert read_progress(compile_pipeline(load(path), "wc").store()).committed_txid == 0
