"""An audit while the real service runs, before and after a SIGKILL of it: no false difference.

The service (``python -m app run``, Spark on a local master, SQLite state) keeps committing txids
over every key while the audit recounts, so the audited txid's keys move on under it: the audit must
read them as of that txid (or again as of a later one), never report them as differing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.commands.helpers import cli
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.service.helpers import (
    WORDS,
    SentenceProducer,
    ServiceProcess,
    committed_txid,
    free_port,
    word_count_config,
    word_counts,
)

PIPELINE = "audit-live"


def _wait_commits(service: ServiceProcess, db: Path, above: int, timeout: float = 240) -> int:
    deadline = time.monotonic() + timeout
    while (txid := committed_txid(db, PIPELINE)) <= above:
        service.check_alive()
        assert time.monotonic() < deadline, f"no commit above txid {above}\n{service.tail()}"
        time.sleep(0.5)
    return txid


def _wait_every_word(service: ServiceProcess, db: Path) -> None:
    """Wait until the state holds every word of WORDS, then for two more commits: a txid still in flight (at most
    ``max_pending``, 2) may have written a word's row before it committed, so from here on every word is stored
    as of any txid an audit can pick."""
    deadline = time.monotonic() + 240
    while set(word_counts(db)) != set(WORDS):
        service.check_alive()
        assert time.monotonic() < deadline, f"not every word stored: {sorted(word_counts(db))}\n{service.tail()}"
        time.sleep(0.5)
    _wait_commits(service, db, committed_txid(db, PIPELINE) + 1)


def _audit_while_running(config: Path, service: ServiceProcess, db: Path, tries: int = 5) -> dict:
    """Audits until one audit ran while the service committed (each audit, overlapping or not, must find no
    difference); a quick audit on a slow machine may fall between two commits, so up to ``tries`` of them."""
    for _ in range(tries):
        before = committed_txid(db, PIPELINE)
        r = cli("audit", "--config", str(config), "--pipeline", PIPELINE, "--json")
        assert r.code == 0, r.err + r.out
        report = json.loads(r.out)
        [table] = report["tables"]
        assert report["differences"] == 0
        assert table["differs"] == table["missing"] == table["extra"] == 0
        # every key compared and found equal, none skipped: the state holds every word as of the audited txid
        # (see _wait_every_word) and keys are never deleted, so the state's keys are WORDS
        stored = word_counts(db)
        assert sorted(stored) == sorted(WORDS)
        assert table["checked"] == table["equal"] == len(stored), table
        service.check_alive()
        if committed_txid(db, PIPELINE) > before:  # the service did commit while this audit ran
            return dict(report)
    raise AssertionError(f"the service committed during none of {tries} audits\n{service.tail()}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_audits_during_a_running_service_and_after_a_sigkill_find_no_false_difference(
        kafka_peer: KafkaPeer, tmp_path: Path) -> None:
    topic = unique_topic("auditlive")
    kafka_peer.create_topic(topic, 2)
    db = tmp_path / "state.db"
    port = free_port()
    config = word_count_config(tmp_path / "c.yaml", bootstrap=kafka_peer.bootstrap_servers(), topic=topic, port=port,
                               pipeline_id=PIPELINE, caps=(150, 300),
                               state={"backend": "sqlite", "sqlite_path": str(db), "table": "word_counts"})
    producer = SentenceProducer(kafka_peer.bootstrap_servers(), topic, 2, rate=150)
    service = ServiceProcess(config, tmp_path / "service.log", port)
    producer.start()
    service.start()
    try:
        _wait_commits(service, db, 3)
        _wait_every_word(service, db)
        first = _audit_while_running(config, service, db)
        service.kill()  # SIGKILL: Spark's JVM and workers too, wherever the txid was
        service.start()
        _wait_commits(service, db, committed_txid(db, PIPELINE) + 2)
        second = _audit_while_running(config, service, db)
        assert second["at_txid"] > first["at_txid"]
    finally:
        producer.stop()
        if service.proc is not None and service.proc.poll() is None:
            service.kill()
