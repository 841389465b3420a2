"""The kill test: the real service, SIGKILLed (with Spark's JVM and workers) at random moments while
data flows, restarted each time; at the end every stored count equals what was produced."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service.helpers import (
    WORDS,
    CqlServerProcess,
    SentenceProducer,
    ServiceProcess,
    committed_txid,
    free_port,
    frozen_txids,
    word_count_config,
    word_counts,
)

KILLS = int(os.environ.get("TRIDENT_KILL_TEST_KILLS", "20"))
CQL_KILLS = int(os.environ.get("TRIDENT_KILL_TEST_CQL_KILLS", "10"))
SEED = int(os.environ.get("TRIDENT_KILL_TEST_SEED", str(int(time.time()))))


def kill_at_random_moments(service: ServiceProcess, db: Path | None, rng: random.Random,
                           kills: int) -> dict[str, int]:
    """Start, wait a random while, SIGKILL the process group; ``kills`` times.

    A quarter of the kills land during start-up (Spark starting, lease being taken); the rest land
    0-3 s after the run committed its first txid, so they fall in planning, processing on Spark,
    freezing, committing the state or marking the txid committed. ``frozen, uncommitted`` counts
    the kills that left a txid frozen but not committed (the next run must replay exactly it).
    """
    landed = {"start-up": 0, "while committing": 0, "frozen, uncommitted": 0}
    for _ in range(kills):
        service.start()
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.5, 6.0))
            service.check_alive()
            landed["start-up"] += 1
        else:
            deadline = time.monotonic() + 90
            while service.commits_this_run() == 0:
                service.check_alive()
                assert time.monotonic() < deadline, f"no commit within 90 s:\n{service.tail()}"
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 3.0))
            service.check_alive()
            landed["while committing"] += 1
        service.kill()
        if db is not None and committed_txid(db, "kill-test") + 1 in frozen_txids(db, "kill-test"):
            landed["frozen, uncommitted"] += 1
    return landed


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_random_moments_counts_every_record_exactly_once(kafka: MockKafkaCluster,
                                                                    tmp_path: Path) -> None:
    """20 SIGKILLs of the whole service at random moments while a producer keeps producing, a restart
    after each, then a drain and SIGTERM (exit 0): every word's stored count equals the ground truth."""
    started = time.monotonic()
    kafka.create_topic("sentences", 4, 3)
    db, port = tmp_path / "state.db", free_port()
    config = word_count_config(tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic="sentences",
                               port=port, state={"backend": "sqlite", "sqlite_path": str(db),
                                                 "table": "word_counts", "cache_size": 100}, caps=(1500, 5000))
    service = ServiceProcess(config, tmp_path / "service.log", port)
    producer = SentenceProducer(kafka.bootstrap_servers(), "sentences", 4, rate=300, seed=SEED)
    producer.start()
    try:
        landed = kill_at_random_moments(service, db, random.Random(SEED), KILLS)
        truth = producer.stop()

        drain_then_terminate(service, lambda: word_counts(db), truth, poll_s=0.5)
    finally:
        service.cleanup()
        producer.stop() if producer.is_alive() else None

    stored = word_counts(db)
    log = service.log.read_text(errors="replace")
    summary = (f"seed {SEED}: {KILLS} kills ({landed}), {producer.acked} sentences, {sum(truth.values())} words, "
               f"{log.count('committed txid')} txid commits logged, "
               f"{log.count('failed (')} failed attempts, {time.monotonic() - started:.0f} s")
    print(summary)
    assert stored == dict(truth), summary
    assert landed["start-up"] + landed["while committing"] == KILLS


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_with_the_state_on_the_cql_server(kafka: MockKafkaCluster, tmp_path: Path) -> None:
    """The kill test with the opaque state and the lease in Cassandra (the CQL test server in its own
    process, surviving every kill): after the drain and SIGTERM every word equals the ground truth."""
    started = time.monotonic()
    kafka.create_topic("sentences", 4, 3)
    port, cql_port = free_port(), free_port()
    with CqlServerProcess(cql_port, tmp_path / "cqlserver.log") as cql:
        config = word_count_config(
            tmp_path / "service.yaml", bootstrap=kafka.bootstrap_servers(), topic="sentences", port=port,
            state={"backend": "cassandra", "table": "word_counts", "cache_size": 100}, caps=(1500, 5000),
            cassandra={"contact_points": ["127.0.0.1"], "port": cql_port, "keyspace": "trident",
                       "local_dc": "datacenter1", "consistency": "ONE", "request_timeout_s": 5})
        service = ServiceProcess(config, tmp_path / "service.log", port)
        producer = SentenceProducer(kafka.bootstrap_servers(), "sentences", 4, rate=300, seed=SEED)
        producer.start()
        try:
            landed = kill_at_random_moments(service, None, random.Random(SEED), CQL_KILLS)
            truth = producer.stop()
            drain_then_terminate(service, lambda: cql.word_counts(WORDS), truth, poll_s=1.0)
        finally:
            service.cleanup()
            producer.stop() if producer.is_alive() else None
        stored = cql.word_counts(WORDS)
    log = service.log.read_text(errors="replace")
    summary = (f"seed {SEED}: {CQL_KILLS} kills ({landed}), {producer.acked} sentences, {sum(truth.values())} words, "
               f"{log.count('committed txid')} txid commits logged, {time.monotonic() - started:.0f} s")
    print(summary)
    assert stored == dict(truth), summary


def drain_then_terminate(service: Any, stored: Callable[[], Any], truth: Any, *, poll_s: float) -> None:
    """Restart the service after the last kill, wait until ``stored()`` equals ``truth`` (4 minutes at
    most, the service alive throughout), then SIGTERM it: it must exit 0."""
    service.start()
    deadline = time.monotonic() + 240
    while stored() != truth:
        service.check_alive()
        assert time.monotonic() < deadline, f"did not drain: {stored()} != {dict(truth)}"
        time.sleep(poll_s)
    service.wait_ready()
    assert service.terminate() == 0
