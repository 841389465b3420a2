"""``audit.every_s``: the real service audits its pipeline on a schedule, exports the result as metrics and logs a
line per audit; a difference planted by hand shows in the metric and the line names its key.

The ground truth is the words produced here; the service runs Spark on a local master with SQLite state.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.audit.schedule import AuditSchedule
from app.config import compile_pipeline, load
from app.metrics import Metrics
from states.values import OpaqueValue
from tests.commands.helpers import WORDS_SPEC, forget_opened
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce
from tests.service.helpers import ServiceProcess, committed_txid, free_port, word_count_config, word_counts

PIPELINE = "audit-sched"


def _metric(service: ServiceProcess, name: str) -> float | None:
    status, body = service.get("/metrics")
    assert status == 200
    m = re.search(rf'^{name}{{pipeline="{PIPELINE}"}} (\S+)$', body.decode(), re.MULTILINE)
    return None if m is None else float(m.group(1))


def _wait(service: ServiceProcess, what: str, ok: Callable[[], bool], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        service.check_alive()
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s\n{service.tail()}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_service_audits_on_a_schedule_and_a_planted_difference_shows_in_the_metric(
        kafka_peer: KafkaPeer, tmp_path: Path) -> None:
    topic = unique_topic("auditsched")
    kafka_peer.create_topic(topic, 2)
    produced = produce(kafka_peer.bootstrap_servers(), topic,
                       [(i % 2, f"w{i % 5} common".encode()) for i in range(200)])
    truth = {f"w{i}": 40 for i in range(5)} | {"common": len(produced)}
    db = tmp_path / "state.db"
    port = free_port()
    config = word_count_config(tmp_path / "c.yaml", bootstrap=kafka_peer.bootstrap_servers(), topic=topic, port=port,
                               pipeline_id=PIPELINE, caps=(40, 80),
                               state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"})
    doc: dict[str, Any] = yaml.safe_load(config.read_text())
    doc["audit"] = {"every_s": 2, "max_share": 1.0}
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    service = ServiceProcess(config, tmp_path / "service.log", port).start()
    try:
        _wait(service, "every record counted", lambda: word_counts(db) == truth)
        committed = committed_txid(db, PIPELINE)
        _wait(service, "an audit of the last txid",
              lambda: _metric(service, "trident_audit_last_txid") == committed)
        assert _metric(service, "trident_audit_last_result") == 1.0
        assert _metric(service, "trident_audit_last_differences") == 0.0
        assert re.search(rf"pipeline {PIPELINE}: audit as of txid {committed} EQUAL", service.run_log())

        forget_opened()
        backing = compile_pipeline(load(config), PIPELINE).state.backing_map(WORDS_SPEC, create=False)
        [w1] = backing.multi_get([("w1",)])
        assert w1 is not None
        backing.multi_put([("w1",)], [OpaqueValue(w1.txid, w1.curr + 7, w1.prev)])  # a hand edit
        _wait(service, "the difference in the metric", lambda: _metric(service, "trident_audit_last_result") == 0.0)
        assert _metric(service, "trident_audit_last_differences") == 1.0
        assert re.search(rf"pipeline {PIPELINE}: audit as of txid {committed} found 1 DIFFERENCES \(keys w1\)",
                         service.run_log())
        assert service.terminate() == 0
    finally:
        service.cleanup()


def test_a_round_that_took_longer_than_its_share_delays_the_next() -> None:
    from prometheus_client import CollectorRegistry

    config = load_doc({"audit": {"every_s": 10, "max_share": 0.2}})
    schedule = AuditSchedule(config, None, Metrics(CollectorRegistry()), active=lambda _: True)
    assert schedule.next_wait(1.0) == 10  # within its share: on time
    assert schedule.next_wait(4.0) == 20  # 4 s of 10 is more than 20 %: every 20 s instead


def load_doc(extra: dict[str, Any]) -> Any:
    from app.config import parse

    doc = {"kafka": {"bootstrap_servers": "localhost:9092"},
           "pipelines": [{"id": "p", "spout": {"topics": ["t"]}, "group_by": ["k"],
                          "transforms": [{"map": ["CAST(value AS STRING) AS k"]}],
                          "aggregates": [{"count": {"as": "n"}}],
                          "state": {"backend": "sqlite", "sqlite_path": "x.db", "table": "t"}}], **extra}
    return parse(doc, {})
