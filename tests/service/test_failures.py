"""The real service under failures: a permanent error stops it with its exit code, a missing topic is
reported as degraded (never ready at txid 0 for ever)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service.helpers import ServiceProcess, free_port, word_count_config


def config_for(tmp_path: Path, kafka: MockKafkaCluster, topic: str, port: int) -> Path:
    return word_count_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic=topic, port=port,
                             state={"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db"),
                                    "table": "word_counts"})


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_unknown_librdkafka_property_stops_the_service_with_exit_2_naming_it(
        kafka: MockKafkaCluster, tmp_path: Path) -> None:
    """Refused when the config is read, before Spark starts, naming the property; never retried.

    (Where only a run can tell, the failure policy classes librdkafka's refusal as permanent:
    ``tests/app/test_failures.py``.)"""
    kafka.create_topic("words", 1, 1)
    port = free_port()
    config = config_for(tmp_path, kafka, "words", port)
    doc = yaml.safe_load(config.read_text())
    doc["kafka"]["properties"] = {"fetch.wiat.max.ms": "5"}
    config.write_text(yaml.safe_dump(doc))
    service = ServiceProcess(config, tmp_path / "service.log", port).start()
    try:
        assert service.proc is not None
        assert service.proc.wait(200) == 2
    finally:
        service.cleanup()
    log = service.run_log()
    assert "kafka.properties.fetch.wiat.max.ms" in log
    assert "No such configuration property" in log
    assert "attempt" not in log
    assert "starting Spark" not in log  # decided at once, before Spark


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_missing_topic_is_degraded_with_the_reason(kafka: MockKafkaCluster, tmp_path: Path) -> None:
    port = free_port()
    service = ServiceProcess(config_for(tmp_path, kafka, "wrods", port), tmp_path / "service.log", port).start()
    try:
        deadline, body = time.monotonic() + 180, cast(dict[str, Any], {})
        while time.monotonic() < deadline:
            service.check_alive()
            try:
                status, body = service.readyz()
            except (OSError, ValueError):
                status = 0
            if body.get("pipelines", {}).get("kill-test", {}).get("committed_txid") is not None \
                    and "wrods" in str(body["pipelines"]["kill-test"].get("reason")):
                break
            time.sleep(0.5)
        pipeline = body["pipelines"]["kill-test"]
        assert status == 503
        assert pipeline["state"] == "degraded"
        assert not pipeline["ready"]
        assert "'wrods' not found" in pipeline["reason"]
        assert kafka.bootstrap_servers() in pipeline["reason"]
        _, metrics = service.get("/metrics")
        assert b'trident_pipeline_state{pipeline="kill-test",state="degraded"} 1.0' in metrics
        assert service.terminate() == 0
    finally:
        service.cleanup()
    assert "'wrods' not found" in service.run_log()
