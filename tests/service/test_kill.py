"""The kill test: the real service, SIGKILLed (with Spark's JVM and workers) at random moments while
data flows, restarted each time; at the end every stored count equals what was produced."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.service.helpers import (
    WORDS,
    CqlServerProcess,
    SentenceProducer,
    ServiceProcess,
    free_port,
    frozen_uncommitted,
    settled,
    sqlite_files,
    state_documents,
    word_count_config,
    word_counts,
)

# Sized to what they prove: each kill point (start-up, after a commit, the freeze window) is hit at least once
# by every run, and twice for the SQLite state; the chaos suite (make chaos-short) adds volume.
KILLS = int(os.environ.get("TRIDENT_KILL_TEST_KILLS", "6"))
CQL_KILLS = int(os.environ.get("TRIDENT_KILL_TEST_CQL_KILLS", "4"))
SEED = int(os.environ.get("TRIDENT_KILL_TEST_SEED", str(int(time.time()))))
KILL_POINTS = ("in the freeze window", "start-up", "after a commit")
#: Starts per freeze-window kill: one whose txid turns out committed after the kill is tried again.
FREEZE_ATTEMPTS = 4


def kill_schedule(rng: random.Random, kills: int) -> list[str]:
    """The kill point of each of ``kills`` kills: rounds of all three points, each round in a seeded order, so
    any run of three kills or more hits every point."""
    order: list[str] = []
    while len(order) < kills:
        order += rng.sample(KILL_POINTS, len(KILL_POINTS))
    return order[:kills]


def kill_at_random_moments(service: ServiceProcess, documents: Callable[[], dict[str, str]], rng: random.Random,
                           kills: int, *, files: Collection[Path] = ()) -> dict[str, int]:
    """Start, pick a moment, SIGKILL the process group; ``kills`` times (and again for a freeze-window miss).

    The points come from :func:`kill_schedule` (each of the three within every three kills); the moment within
    a point is random. Start-up kills land 0.5-6 s after the start (Spark starting, lease being taken);
    after-a-commit kills land 0-3 s after the run committed its first txid (planning, processing on Spark,
    freezing, committing the state, marking the txid committed); freeze-window kills are steered into the window
    the freeze exists for: a txid's plan stored, its state being written, the txid not yet marked committed.
    Those poll the coordinator's ``documents()`` until they see that window, stop the whole process group
    (SIGSTOP), check again, and SIGKILL it there.

    Where a kill landed is read from the store after the kill, :func:`settled` (``files``: the SQLite
    database's), never from the look taken while the group was stopped: a stopped group still has its
    last write land (a commit frame already in the SQLite WAL, a request already delivered to the CQL server),
    so a txid seen frozen then can be committed after the kill (seed 1796520874 on a loaded CI machine). A
    freeze-window kill counts as one only when the settled store holds a txid frozen but not committed (the next
    run must replay exactly it); otherwise it counts under ``commit landed after the stop`` and the point is
    tried again, :data:`FREEZE_ATTEMPTS` starts at most. ``frozen, uncommitted`` counts every kill that left such
    a txid.
    """
    landed = dict.fromkeys(KILL_POINTS, 0) | {"frozen, uncommitted": 0, "commit landed after the stop": 0}
    for point in kill_schedule(rng, kills):
        for _ in range(FREEZE_ATTEMPTS if point == "in the freeze window" else 1):
            service.start()
            if point == "in the freeze window":
                wait_for_first_commit(service)
                stop_in_freeze_window(service, documents)
            elif point == "start-up":
                time.sleep(rng.uniform(0.5, 6.0))
                service.check_alive()
            else:
                wait_for_first_commit(service)
                time.sleep(rng.uniform(0.0, 3.0))
                service.check_alive()
            service.kill()
            left_frozen = frozen_uncommitted(settled(documents, files=files)) is not None
            landed["frozen, uncommitted"] += left_frozen
            if point != "in the freeze window" or left_frozen:
                landed[point] += 1
                break
            landed["commit landed after the stop"] += 1
    return landed


def wait_for_first_commit(service: ServiceProcess, timeout: float = 360) -> None:
    """Wait for this run's first committed txid. The bound is for a loaded machine, not a goal: at load 27 Spark's
    start-up alone took 62 s and a first txid 35 s (90 s failed the CQL kill test there with nothing wrong)."""
    deadline = time.monotonic() + timeout
    while service.commits_this_run() == 0:
        service.check_alive()
        assert time.monotonic() < deadline, f"no commit within {timeout} s:\n{service.tail()}"
        time.sleep(0.1)


def stop_in_freeze_window(service: ServiceProcess, documents: Callable[[], dict[str, str]],
                          timeout: float = 120) -> None:
    """Leave the service stopped (SIGSTOP) while a txid is frozen but not committed: the caller kills it there."""
    deadline = time.monotonic() + timeout
    while True:
        service.check_alive()
        assert time.monotonic() < deadline, f"no txid seen frozen and uncommitted in {timeout} s"
        if frozen_in(documents) is not None:
            service.pause()
            if frozen_in(documents) is not None:
                return
            service.resume()  # it committed between the two reads, or its lock hid the store: look again
        time.sleep(0.005)


def frozen_in(documents: Callable[[], dict[str, str]]) -> int | None:
    """:func:`frozen_uncommitted` of ``documents()``; None when the store cannot be read now: a writer stopped
    (SIGSTOP) inside SQLite's WAL locks makes a reader fail (``locking protocol``, seed 662072568), not wait."""
    try:
        return frozen_uncommitted(documents())
    except sqlite3.OperationalError:
        return None


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_at_random_moments_counts_every_record_exactly_once(kafka: MockKafkaCluster,
                                                                    tmp_path: Path) -> None:
    """SIGKILLs of the whole service at each kill point while a producer keeps producing, a restart after
    each, then a drain and SIGTERM (exit 0): every word's stored count equals the ground truth."""
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
        landed = kill_at_random_moments(service, lambda: state_documents(db, "kill-test"), random.Random(SEED), KILLS,
                                        files=sqlite_files(db))
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
    assert all(landed[point] > 0 for point in KILL_POINTS), summary  # a freeze-window kill read after the kill


@pytest.mark.slow
@pytest.mark.timeout(1800)
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
            landed = kill_at_random_moments(service, lambda: cql.state_documents("kill-test"), random.Random(SEED),
                                            CQL_KILLS)
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
    assert all(landed[point] > 0 for point in KILL_POINTS), summary  # a freeze-window kill read after the kill


def drain_then_terminate(service: Any, stored: Callable[[], Any], truth: Any, *, poll_s: float,
                         stall_s: float = 180) -> None:
    """Restart the service after the last kill, wait until ``stored()`` equals ``truth``, then SIGTERM it: it must
    exit 0. The wait ends in failure when the stored counts stop moving for ``stall_s`` while short of the truth
    (a lost record never arrives), not after a fixed time: on a loaded machine a slow drain is still a drain."""
    service.start()
    last, moved = stored(), time.monotonic()
    while last != truth:
        service.check_alive()
        assert time.monotonic() - moved < stall_s, (
            f"did not drain: no stored count changed for {stall_s:.0f} s, {last} != {dict(truth)}")
        time.sleep(poll_s)
        now = stored()
        if now != last:
            last, moved = now, time.monotonic()
    service.wait_ready()
    assert service.terminate() == 0
    assert stored() == truth, "counts changed after the drain: a late write while stopping"
