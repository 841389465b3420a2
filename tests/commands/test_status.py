"""``status``: lease, committed and frozen txids, per-partition lag, read without the service running."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.config import compile_pipeline, load
from app.coordinator.progress import ProgressLog, StoredBatch, read_progress
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from tests.commands.backends import STATE_BACKENDS, state_section
from tests.commands.helpers import cli, forget_opened, run_pipeline, write_config
from tests.kafka.fixtures import KafkaPeer, MockKafkaCluster, unique_topic
from tests.kafka.helpers import produce


@pytest.mark.parametrize("backend", STATE_BACKENDS)
def test_status_shows_lease_txids_and_lag(kafka_peer: KafkaPeer, backend: str, request: pytest.FixtureRequest,
                                          tmp_path: Path) -> None:
    topic = unique_topic("st")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    state, cassandra = state_section(backend, request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, state=state, cassandra=cassandra)
    produce(bootstrap, topic, [(i % 2, b"w") for i in range(10)])
    committed = run_pipeline(path)
    produce(bootstrap, topic, [(0, b"w")] * 4)  # 4 records of lag on partition 0

    r = cli("status", "--config", str(path), "--json")
    assert r.code == 0, r.err
    [s] = json.loads(r.out)
    assert s["pipeline"] == "wc"
    assert s["lease"] is None
    assert s["frozen_txid"] is None
    assert s["committed_txid"] == committed
    assert s["committed_at"] is not None
    assert s["partitions"] == [
        {"partition": f"{topic}:0", "committed_next_offset": 5, "end_offset": 9, "lag": 4, "read_now": True},
        {"partition": f"{topic}:1", "committed_next_offset": 5, "end_offset": 5, "lag": 0, "read_now": True}]

    forget_opened()
    store = compile_pipeline(load(path), "wc").store()
    epoch = store.acquire_lease("pod-3", 60)
    plan = BatchPlan(committed + 1, {Partition(topic, 0): PartitionMetadata(topic, 0, 5, 9, 4, "wc")})
    ProgressLog(store, epoch=epoch).store_batch(StoredBatch(plan, 2))
    r = cli("status", "--config", str(path))
    assert r.code == 0, r.err
    assert f"held by pod-3 (epoch {epoch}), expires in" in r.out
    assert f"committed: txid {committed} at " in r.out
    assert f"frozen:    txid {committed + 1} (attempt 2): replayed by the next start" in r.out
    assert re.search(rf"^{topic}:0\s+5\s+9\s+4$", r.out, re.MULTILINE), r.out
    assert read_progress(store).committed_txid == committed  # status wrote nothing


def test_status_without_kafka_still_shows_the_store(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """Kafka unreachable: the stored part is shown, the end offsets are reported missing, exit 4."""
    topic = unique_topic("st")
    kafka_cluster.create_topic(topic, 1)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"w")] * 3)
    run_pipeline(path)
    away = write_config(tmp_path / "away.yaml", bootstrap="127.0.0.1:1", topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")},
                        kafka_extra={"request_timeout_s": 1})  # nothing answers there: the query waits it out
    r = cli("status", "--config", str(away), "--json")
    assert r.code == 4, r.err
    [s] = json.loads(r.out)
    assert s["committed_txid"] == 1
    assert s["errors"][0].startswith("cannot read end offsets from Kafka")
    assert s["partitions"] == [{"partition": f"{topic}:0", "committed_next_offset": 3, "end_offset": None, "lag": None,
                                "read_now": None}]


def test_status_of_a_pipeline_never_run(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="t",
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "none.db")})
    r = cli("status", "--config", str(path), "--pipeline", "wc", "--json")
    assert r.code == 4
    assert "does not exist (never run?)" in r.out
    assert not (tmp_path / "none.db").exists()  # status creates nothing
    r = cli("status", "--config", str(path), "--pipeline", "nope")
    assert r.code == 2
    assert "--pipeline 'nope'" in r.err
