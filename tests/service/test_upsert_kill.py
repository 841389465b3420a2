"""The upsert kill test: the real service materialises a keyed topic (latest values, tombstones that
delete) while it is SIGKILLed at random moments and restarted; at the end every stored row equals the
last record of its key, from the producer's delivery reports."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service import test_kill
from tests.service.helpers import ServiceProcess, free_port, sqlite_files, state_documents, word_count_config
from tests.service.test_kill import KILL_POINTS, SEED, drain_then_terminate, kill_at_random_moments

KILLS = int(os.environ.get("TRIDENT_UPSERT_KILL_TEST_KILLS", "4"))
PARTITIONS, KEYS = 4, 40
PIPELINE = "upsert-kill"


class UpsertProducer(threading.Thread):
    """Keyed records (a key always to the same partition) with growing timestamps, a tenth tombstones.

    ``last`` is the ground truth from the delivery reports: per key, the acknowledged record with the
    highest offset in its partition (None: a tombstone, the key is deleted).
    """

    def __init__(self, bootstrap: str, topic: str, rate: float, seed: int) -> None:
        super().__init__(name="upsert-producer", daemon=True)
        self.topic, self.rate, self.rng = topic, rate, random.Random(seed)
        self.last: dict[str, tuple[int, dict[str, Any] | None]] = {}  # key -> (offset, document)
        self.sent = self.acked = 0
        self.errors: list[Any] = []
        self._stop_event, self._lock = threading.Event(), threading.Lock()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
        self._clock = int(time.time() * 1000)

    def run(self) -> None:
        while not self._stop_event.is_set():
            for _ in range(max(1, int(self.rate / 20))):
                self.produce_one()
            self._producer.poll(0)
            self._stop_event.wait(0.05)
        self._producer.flush(30)

    def produce_one(self) -> None:
        k = self.rng.randrange(KEYS)
        key = f"acct-{k}"
        doc = None if self.rng.random() < 0.1 else {"amount": self.rng.randint(0, 10**6), "owner": f"o{self.sent}"}
        self._clock += 1  # strictly growing: offset order and (timestamp, partition, offset) order agree
        self._producer.produce(self.topic, None if doc is None else json.dumps(doc).encode(), key=key.encode(),
                               partition=k % PARTITIONS, timestamp=self._clock,
                               on_delivery=lambda err, msg, key=key, doc=doc: self._acked(err, msg, key, doc))  # type: ignore[misc]  # defaults bind this call's values
        self.sent += 1

    def _acked(self, err: Any, msg: Any, key: str, doc: dict[str, Any] | None) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(err)
                return
            self.acked += 1
            if key not in self.last or self.last[key][0] < msg.offset():
                self.last[key] = (msg.offset(), doc)

    def stop(self) -> dict[str, tuple[int, str]]:
        """Stop producing; the truth: ``{key: (amount, owner)}`` of every key not deleted at its end."""
        self._stop_event.set()
        if self.ident is not None:
            self.join(60)
        assert not self.errors, self.errors[:5]
        assert self._producer.flush(30) == 0
        assert self.acked == self.sent
        return {k: (d["amount"], d["owner"]) for k, (_, d) in self.last.items() if d is not None}


def upsert_config(path: Path, *, bootstrap: str, topic: str, port: int, db: Path) -> Path:
    """The word-count service config of the kill test, turned into an upsert of keyed JSON records."""
    word_count_config(path, bootstrap=bootstrap, topic=topic, port=port, pipeline_id=PIPELINE, caps=(2500, 10000),
                      state={"backend": "sqlite", "sqlite_path": str(db), "table": "accounts", "cache_size": 100,
                             "tombstones": "delete"})
    doc = yaml.safe_load(path.read_text())
    p = doc["pipelines"][0]
    p["transforms"] = [{"map": ["CAST(key AS STRING) AS id",
                                "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount",
                                "get_json_object(CAST(value AS STRING), '$.owner') AS owner"]}]
    p["group_by"] = ["id"]
    p["aggregates"] = [{"latest": {"field": "amount", "as": "amount"}}, {"latest": {"field": "owner", "as": "owner"}}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def stored_accounts(db: Path) -> dict[str, tuple[int, str]]:
    """The live rows, read with plain SQL: a deleted key's row stays (deleted = 1) and is left out."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return {k: (a, o) for k, a, o in conn.execute("SELECT id, amount, owner FROM accounts WHERE deleted IS NOT 1")}
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_at_random_moments_keeps_the_last_record_per_key(kafka: MockKafkaCluster, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILLs of the whole service while keyed records and tombstones keep coming, a restart after
    each, then a drain and SIGTERM (exit 0): the table holds exactly the last record of every key, and
    the keys whose last record is a tombstone are absent (their rows kept, with a txid)."""
    started = time.monotonic()
    first_commit = test_kill.wait_for_first_commit  # Spark's start-up alone can take minutes on a loaded machine
    monkeypatch.setattr(test_kill, "wait_for_first_commit", lambda service: first_commit(service, timeout=360))
    kafka.create_topic("accounts", PARTITIONS, 3)
    db, port = tmp_path / "state.db", free_port()
    config = upsert_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic="accounts",
                           port=port, db=db)
    service = ServiceProcess(config, tmp_path / "service.log", port)
    producer = UpsertProducer(kafka.bootstrap_servers(), "accounts", rate=40, seed=SEED)
    producer.start()
    try:
        landed = kill_at_random_moments(service, lambda: state_documents(db, PIPELINE), random.Random(SEED), KILLS,
                                        files=sqlite_files(db))
        truth = producer.stop()
        drain_then_terminate(service, lambda: stored_accounts(db), truth, poll_s=0.5)
    finally:
        service.cleanup()
        producer.stop() if producer.is_alive() else None
    deleted = set(producer.last) - set(truth)
    conn = sqlite3.connect(str(db))
    try:
        tombstoned = {k for k, t in conn.execute("SELECT id, txid FROM accounts WHERE deleted = 1") if t is not None}
    finally:
        conn.close()
    summary = (f"seed {SEED}: {KILLS} kills ({landed}), {producer.acked} records, {len(truth)} live keys, "
               f"{len(deleted)} deleted, {time.monotonic() - started:.0f} s")
    print(summary)
    assert stored_accounts(db) == truth, summary
    assert tombstoned == deleted, summary
    assert all(landed[point] > 0 for point in KILL_POINTS), summary  # a freeze-window kill read after the kill
