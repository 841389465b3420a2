"""A run with 1% bad records logs at most twice what the clean run logs, and no stack trace.

The same 100,000 records twice, once clean and once with every 100th not a number (a transform fails on it,
``errors: skip``); the service's whole output (stdout and stderr, Spark's included) is measured. PySpark
used to log each captured SQL error with its JVM stack trace (~16 KB a record); then each txid still wrote
three sampled lines with Spark's whole message and the isolation's lines (5.8x the clean run at 5,000).
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest
import yaml

from tests.kafka.fixtures import MockKafkaCluster, unique_topic
from tests.kafka.helpers import produce
from tests.service.helpers import ServiceProcess, free_port, word_count_config

pytestmark = pytest.mark.slow
RECORDS, BAD_EVERY = 100_000, 100
CAPS = (10_000, 20_000)  # five txids of 20,000 records


def _run(kafka: MockKafkaCluster, tmp_path: Path, name: str, bad: bool) -> tuple[int, str]:
    topic = unique_topic(name)
    kafka.create_topic(topic, 2)
    values = [(i % 2, b"x%d" % i if bad and i % BAD_EVERY == BAD_EVERY - 1 else str(i).encode())
              for i in range(RECORDS)]
    produce(kafka.bootstrap_servers(), topic, values)
    good = sum(1 for _, v in values if v.isdigit())
    port, db = free_port(), tmp_path / f"{name}.db"
    config = word_count_config(tmp_path / f"{name}.yaml", bootstrap=kafka.bootstrap_servers(), topic=topic,
                               port=port, state={"backend": "sqlite", "sqlite_path": str(db), "table": "t"},
                               caps=CAPS)
    doc = yaml.safe_load(config.read_text())
    doc["pipelines"][0]["transforms"] = [{"map": ["CAST(CAST(CAST(value AS STRING) AS INT) % 10 AS STRING) AS word"]}]
    doc["pipelines"][0]["errors"] = "skip"
    config.write_text(yaml.safe_dump(doc))
    log = tmp_path / f"{name}.log"
    service = ServiceProcess(config, log, port).start()
    try:
        deadline = time.monotonic() + 600
        while _stored(db) < good:
            service.check_alive()
            assert time.monotonic() < deadline, service.tail()
            time.sleep(1)
        assert service.terminate() == 0, service.tail()
    finally:
        service.cleanup()
    assert _stored(db) == good
    text = log.read_text(errors="replace")
    return len(text.encode()), text


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as c:
            return int(c.execute("SELECT COALESCE(SUM(count), 0) FROM t").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def test_one_percent_bad_logs_within_twice_the_clean_run(kafka: MockKafkaCluster, tmp_path: Path) -> None:
    clean, _ = _run(kafka, tmp_path, "clean", bad=False)
    dirty, text = _run(kafka, tmp_path, "dirty", bad=True)
    bad = RECORDS // BAD_EVERY
    print(f"log bytes: clean {clean}, 1% bad {dirty} ({dirty / clean:.2f}x, {(dirty - clean) / bad:.1f} B a bad record)")
    assert "Traceback" not in text, text[-5000:]
    assert "at org.apache.spark" not in text, text[-5000:]
    assert dirty <= 2 * clean, f"clean {clean} B, 1% bad {dirty} B:\n{text[-5000:]}"
    # the commit lines tell the skipped records apart from the counted ones
    commits = re.findall(r"committed txid \d+: (\d+) records \((\d+) counted, (\d+) skipped, (\d+) dead-lettered\)",
                         text)
    assert sum(int(c[2]) for c in commits) == RECORDS // BAD_EVERY, commits
    assert sum(int(c[1]) for c in commits) == RECORDS - RECORDS // BAD_EVERY, commits
