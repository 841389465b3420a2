"""Bad records in the real service (``python -m app run``): with ``errors: dead_letter`` under SIGKILLs at
random moments, each bad record is in the dead-letter topic exactly once and the state equals the ground
truth over the good records; with ``errors: fail`` the service exits 1 within the txid, naming the record."""

from __future__ import annotations

import functools
import json
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from app.bad_records.dead_letters import coordinates_of
from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service import test_kill
from tests.service.helpers import ServiceProcess, free_port, state_documents
from tests.service.test_kill import KILL_POINTS, drain_then_terminate, kill_at_random_moments

KILLS = int(os.environ.get("TRIDENT_DEAD_LETTER_KILLS", "4"))
#: Where the two poison records found by bisection go (record numbers; empty: decode-stage poison only).
COSTLY_AT = tuple(int(n) for n in os.environ.get("TRIDENT_DEAD_LETTER_COSTLY_AT", "150,450").split(",") if n)
SEED = int(os.environ.get("TRIDENT_KILL_TEST_SEED", str(int(time.time()))))
USERS = ("ann", "bob", "cy", "dee", "eve")
POISON = (b'{"user": "bob", "amount": 1',  # decode: not JSON
          b'{"user": "cy", "amount": "lots"}',  # decode: amount is not the declared bigint
          b"not json at all")  # decode
COSTLY = (b'{"user": "bob", "amount": -7}',  # transform: the CAST of a negative amount fails (ANSI)
          b'{"amount": 5}')  # aggregate: no user, a null group-by key
Coordinates = tuple[str, int, int]


def sales_config(path: Path, *, bootstrap: str, port: int, db: Path, errors: Any, pipeline: str = "sales") -> Path:
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout_s": 5, "read_timeout_s": 10},
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 4, "spark.default.parallelism": 4}},
        "http": {"host": "127.0.0.1", "port": port},
        "service": {"shutdown_grace_s": 60, "ready_window_s": 60},
        "pipelines": [{
            "id": pipeline,
            "spout": {"topics": ["sales"], "first_poll": "earliest", "discovery_interval_s": 1,
                      "caps": {"per_partition": 150, "per_batch": 600},
                      "value_format": {"type": "json", "fields": {"user": "string", "amount": "bigint"}}},
            "transforms": [{"map": ["value.user AS user",
                                    ("CAST(IF(value.amount >= 0, CAST(value.amount AS STRING), 'negative') AS BIGINT) "
                                    "AS amount")]}],
            "group_by": ["user"],
            "aggregates": [{"sum": {"field": "amount", "as": "total"}}, {"count": {"as": "n"}}],
            "state": {"backend": "sqlite", "sqlite_path": str(db), "table": "sales"},
            "errors": errors,
            "max_pending": 2,
            "idle_sleep_s": 0.2,
        }],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class SalesProducer(threading.Thread):
    """Produces sales records (one in ``poison_every`` poison) until stopped; keeps the truth of the good ones."""

    def __init__(self, bootstrap: str, partitions: int, rate: float, seed: int, poison_every: int = 50,
                 costly_at: tuple[int, ...] = ()) -> None:
        super().__init__(name="sales-producer", daemon=True)
        self.partitions, self.rate = partitions, rate
        self.poison_every, self.costly_at = poison_every, costly_at
        self.rng = random.Random(seed)
        self.truth: dict[str, tuple[int, int]] = {}
        self.poison: set[Coordinates] = set()
        self.sent = self.acked = 0
        self.errors: list[Any] = []
        self._stop_event, self._lock = threading.Event(), threading.Lock()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def run(self) -> None:
        while not self._stop_event.is_set():
            for _ in range(max(1, int(self.rate / 20))):
                self.produce_one()
            self._producer.poll(0)
            self._stop_event.wait(0.05)
        self._producer.flush(30)

    def produce_one(self) -> None:
        if self.sent in self.costly_at:  # found by bisection: a few Spark jobs each
            value, good = COSTLY[self.costly_at.index(self.sent) % len(COSTLY)], None
        elif self.sent % self.poison_every == self.poison_every - 1:  # found while decoding: free
            value, good = POISON[(self.sent // self.poison_every) % len(POISON)], None
        else:
            good = (self.rng.choice(USERS), self.rng.randint(1, 99))
            value = json.dumps({"user": good[0], "amount": good[1]}).encode()
        self._producer.produce("sales", value, partition=self.sent % self.partitions,
                               on_delivery=lambda err, msg, g=good: self._acked(err, msg, g))  # type: ignore[misc]  # defaults bind this call's values
        self.sent += 1

    def _acked(self, err: Any, msg: Any, good: tuple[str, int] | None) -> None:
        with self._lock:
            if err is not None:
                self.errors.append(err)
                return
            self.acked += 1
            if good is None:
                self.poison.add((msg.topic(), msg.partition(), msg.offset()))
            else:
                total, n = self.truth.get(good[0], (0, 0))
                self.truth[good[0]] = (total + good[1], n + 1)

    def stop(self) -> dict[str, tuple[int, int]]:
        self._stop_event.set()
        if self.ident is not None:
            self.join(60)
        assert not self.errors, self.errors[:5]
        assert self._producer.flush(30) == 0
        assert self.acked == self.sent
        return dict(self.truth)


def stored_sales(db: Path) -> dict[str, tuple[int, int]]:
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return {u: (int(t), int(n)) for u, t, n in conn.execute("SELECT user, total, n FROM sales")}
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


def dead_letter_coordinates(bootstrap: str, topic: str) -> list[tuple[str | None, Coordinates | None]]:
    """(pipeline, source coordinates) of every message of ``topic``, read_committed from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, eof, deadline = [], set[int](), time.monotonic() + 60
        while len(eof) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(500, timeout=1.0):
                err = m.error()
                if err is None:
                    out.append(coordinates_of(m.headers()))  # type: ignore[arg-type]
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(cast(int, m.partition()))
        assert len(eof) == len(parts), "could not read the dead-letter topic to its end"
        return out
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.timeout(2700)
def test_sigkills_leave_each_bad_record_in_the_dead_letter_topic_exactly_once(kafka: MockKafkaCluster,
                                                                               tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILLs of the whole service at each kill point (the freeze window among them) while JSON sales
    flow with a poison record in every 50 (not JSON, a mistyped field: stage decode) and two that are
    found by bisection (a failing CAST, a null group-by key: stages transform and aggregate); then a drain and SIGTERM: the
    dead-letter topic holds each poison record once (by source coordinates, read_committed) and the stored
    (total, count) per user equals the ground truth over the good records."""
    started = time.monotonic()
    # a txid with a transform or aggregate poison record runs a few more Spark jobs (the bisection)
    monkeypatch.setattr(test_kill, "wait_for_first_commit", functools.partial(test_kill.wait_for_first_commit,
                                                                              timeout=400))
    monkeypatch.setattr(test_kill, "stop_in_freeze_window", functools.partial(test_kill.stop_in_freeze_window,
                                                                              timeout=400))
    kafka.create_topic("sales", 4, 3)
    kafka.create_topic("sales-dead", 2, 3)
    db, port = tmp_path / "state.db", free_port()
    config = sales_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), port=port, db=db,
                          errors={"dead_letter": {"topic": "sales-dead"}})
    service = ServiceProcess(config, tmp_path / "service.log", port)
    producer = SalesProducer(kafka.bootstrap_servers(), 4, rate=10, seed=SEED, costly_at=COSTLY_AT)
    producer.start()
    try:
        landed = kill_at_random_moments(service, lambda: state_documents(db, "sales"), random.Random(SEED), KILLS)
        truth = producer.stop()
        drain_then_terminate(service, lambda: stored_sales(db), truth, poll_s=0.5)
    finally:
        service.cleanup()
        producer.stop() if producer.is_alive() else None
    letters = dead_letter_coordinates(kafka.bootstrap_servers(), "sales-dead")
    coords = [c for _, c in letters]
    summary = (f"seed {SEED}: {KILLS} kills ({landed}), {producer.acked} records, {len(producer.poison)} poison, "
               f"{len(letters)} dead letters, {time.monotonic() - started:.0f} s")
    print(summary)
    assert {p for p, _ in letters} == {"sales"}, summary
    assert len(coords) == len(set(coords)), f"duplicated dead letters: {summary}"
    assert set(coords) == producer.poison, summary
    assert stored_sales(db) == truth, summary
    assert all(landed[point] > 0 for point in KILL_POINTS), summary
    assert landed["frozen, uncommitted"] >= landed["in the freeze window"] > 0, summary


@pytest.mark.timeout(600)
def test_errors_fail_exits_1_within_the_txid_naming_the_record(kafka: MockKafkaCluster, tmp_path: Path) -> None:
    """``errors: fail`` (the default): a record whose amount does not CAST stops the service with exit code 1
    on the txid's first attempt; the message names the topic, partition, offset and the error class."""
    kafka.create_topic("sales", 2, 3)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers()})
    good = json.dumps({"user": "ann", "amount": 3}).encode()
    for _ in range(30):
        producer.produce("sales", good, partition=0)
    producer.produce("sales", COSTLY[0], partition=1)
    assert producer.flush(30) == 0
    db, port = tmp_path / "state.db", free_port()
    config = sales_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), port=port, db=db,
                          errors="fail")
    service = ServiceProcess(config, tmp_path / "service.log", port)
    code = service.run_to_exit(300)
    log = service.run_log()
    assert code == 1, log[-3000:]
    assert "sales[1]@0" in log, log[-3000:]
    assert "CAST_INVALID_INPUT" in log, log[-3000:]
    assert log.count("failed permanently") == 1, log[-3000:]
    assert "attempt 1 failed permanently" in log, log[-3000:]
    assert stored_sales(db) == {}  # the only txid held the poison record: nothing of it was written
