"""``rewind``: a new committed txid at the target offsets, under its own lease; a full recount with --reset-state.

Ground truth is counted here from what the broker acknowledged, never from what the pipeline stored.
The mock Kafka cluster answers no timestamp lookups (ListOffsets by time gives -1), so on the mock
the rewind point is named with ``offsets:``; on a real Kafka the same test rewinds with
``timestamp:`` (see ``tests/kafka/fixtures.py`` TIMESTAMP_LOOKUP).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.config import compile_pipeline, load
from app.coordinator.progress import ProgressLog, StoredBatch, read_progress, read_rewinds
from app.topology.local import LocalExecutor
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from states.errors import LeaseHeldError
from tests.commands.backends import STATE_BACKENDS, state_section
from tests.commands.helpers import cli, forget_opened, pipeline_coordinator, run_pipeline, words_of, write_config
from tests.kafka.fixtures import TIMESTAMP_LOOKUP, KafkaPeer, MockKafkaCluster, unique_topic
from tests.kafka.helpers import produce

T0 = 1_700_000_000_000  # record timestamps (CreateTime): batch A at T0.., batch B at T1..
T1 = T0 + 3_600_000


def _store(path: Path):
    forget_opened()
    return compile_pipeline(load(path), "wc").store()


def _counts(path: Path) -> dict[str, int]:
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "1000", "--json")
    assert r.code == 0, r.err
    return {row["word"]: row["count"] for row in json.loads(r.out)}


@pytest.mark.parametrize("backend", STATE_BACKENDS)
def test_rewind_with_reset_state_recounts_exactly_the_records_from_that_point(
        kafka_peer: KafkaPeer, backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Count A, then A+B; rewind to where B starts with --reset-state; run: the table equals B's words exactly."""
    topic = unique_topic("rw")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    state, cassandra = state_section(backend, request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, state=state, cassandra=cassandra,
                        spout={"topics": [topic], "first_poll": "earliest", "discovery_interval_s": 0,
                               "caps": {"per_partition": 7, "per_batch": 10}})
    a = [(i % 2, f"alpha w{i % 5}".encode()) for i in range(40)]
    produced_a = produce(bootstrap, topic, a, timestamps=[T0 + i for i in range(len(a))])
    assert run_pipeline(path) > 0
    assert _counts(path) == words_of([r.value for r in produced_a])

    b = [(i % 2, f"bravo w{i % 3}".encode()) for i in range(30)]
    produced_b = produce(bootstrap, topic, b, timestamps=[T1 + i for i in range(len(b))])
    run_pipeline(path)
    assert _counts(path) == words_of([r.value for r in produced_a + produced_b])
    before = read_progress(_store(path)).committed_txid

    starts = {p: min(r.offset for r in produced_b if r.partition == p) for p in (0, 1)}
    if TIMESTAMP_LOOKUP[kafka_peer.kind]:
        to = "timestamp:" + datetime.fromtimestamp(T1 / 1000, UTC).isoformat()
    else:  # the mock cannot look up times: name B's first offsets instead
        to = "offsets:" + ",".join(f"{topic}:{p}={o}" for p, o in sorted(starts.items()))
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", to, "--reset-state", "--yes-i-know")
    assert r.code == 0, r.err
    assert f"rewound as txid {before + 1}" in r.out
    assert "tables emptied for a full recount: word_counts" in r.out
    assert _counts(path) == {}

    store = _store(path)
    prog = read_progress(store)
    assert prog.committed_txid == before + 1  # txids only grow
    assert prog.committed_plan is not None
    assert {m.partition_id: (m.first_offset, m.next_offset) for m in prog.committed_plan.partitions.values()} == \
        {Partition(topic, p): (o, o) for p, o in starts.items()}
    [audit] = read_rewinds(store)
    assert audit["done"]
    assert audit["reset_state"]
    assert audit["truncated"] == ["word_counts"]
    assert audit["to_offsets"] == {f"{topic}:{p}": o for p, o in starts.items()}
    assert audit["from"] == {f"{topic}:{p}": max(x.offset for x in produced_a + produced_b if x.partition == p) + 1
                             for p in (0, 1)}
    assert store.lease_info() is None  # released

    assert run_pipeline(path) > 0
    assert _counts(path) == words_of([r.value for r in produced_b])  # the recount: B exactly, A never again


def test_rewind_is_refused_while_a_service_holds_the_lease(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """A coordinator holds the lease: rewind names it and its expiry, exits 3, and changes nothing."""
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"a b")] * 5)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    committed = read_progress(_store(path)).committed_txid
    service = pipeline_coordinator(path, owner="pod-7")
    service.start()  # what a running service does first: take the lease
    try:
        r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest")
        assert r.code == 3, r.err
        assert "the lease is held by 'pod-7'" in r.err
        assert "lease expires at" in r.err
        store = _store(path)
        assert read_progress(store).committed_txid == committed
        assert read_rewinds(store) == []
        assert store.lease_info().owner == "pod-7"
        assert _counts(path) == {"a": 5, "b": 5}
        produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"c")])
        assert service.run_until_idle() == 1  # the service was not disturbed: its lease and epoch still hold
    finally:
        service.close()
    assert _counts(path) == {"a": 5, "b": 5, "c": 1}


def test_reset_state_needs_the_confirmation_flag(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest", "--reset-state")
    assert r.code == 3
    assert "add --yes-i-know" in r.err
    assert _counts(path) == {"x": 3}
    assert read_progress(_store(path)).committed_txid == 1


def test_without_reset_the_rewind_counts_again_and_says_so(kafka_cluster: MockKafkaCluster, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """Stored aggregates are not rolled back: rewinding to earliest without a reset counts everything twice."""
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x y")] * 4)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    caplog.set_level(logging.INFO, logger="app.rewind")
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest")
    assert r.code == 0, r.err
    assert "stored aggregates are NOT rolled back" in r.out
    assert "rewind of wc by rewind@" in caplog.text
    assert "reset_state=False" in caplog.text  # the log's audit line
    run_pipeline(path)
    assert _counts(path) == {"x": 8, "y": 8}


def test_rewind_txid_is_above_a_frozen_uncommitted_one(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """A frozen txid N+1 may have written some keys: a rewind (with --reset-state: without, it is refused, see
    below) commits N+2, so every stored txid stays below."""
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    store = _store(path)
    epoch = store.acquire_lease("crashed-pod", 0.001)
    frozen = BatchPlan(2, {Partition(topic, 0): PartitionMetadata(topic, 0, 3, 3, 0, "wc")})
    ProgressLog(store, epoch=epoch).store_batch(StoredBatch(frozen, 1))
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", f"offsets:{topic}:0=1")
    assert r.code == 3, r.err
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", f"offsets:{topic}:0=1", "--reset-state",
            "--yes-i-know")
    assert r.code == 0, r.err
    assert "rewound as txid 3" in r.out
    assert read_progress(_store(path)).committed_txid == 3


@pytest.mark.parametrize(("to", "message"), [
    ("yesterday", "use earliest, latest, timestamp:ISO-8601"),
    ("timestamp:noon", "not an ISO-8601 time"),
    ("offsets:t0=5", "'t0=5' is not TOPIC:PARTITION=OFFSET"),
    ("offsets:{topic}:0=99", "is outside the log [0, 3]"),
    ("offsets:other:0=1", "partition other:0 is not one the pipeline reads"),
])
def test_bad_targets_are_refused_naming_them(kafka_cluster: MockKafkaCluster, tmp_path: Path, to: str,
                                             message: str) -> None:
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", to.format(topic=topic))
    assert r.code == 2, r.err
    assert message in r.err, r.err


def test_mock_still_cannot_look_up_offsets_by_time(kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """The mock answers -1 to a timestamp lookup even before every record, so a timestamp rewind lands at the end.

    If this fails after a librdkafka upgrade, the mock answers timestamp lookups: set TIMESTAMP_LOOKUP["mock"]
    in tests/kafka/fixtures.py so the recount test above rewinds by timestamp on the mock too.
    """
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 4, timestamps=[T1] * 4)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "timestamp:2000-01-01T00:00:00Z")
    assert r.code == 0, r.err
    [audit] = read_rewinds(_store(path))
    assert audit["to_offsets"] == {f"{topic}:0": 4}, "the mock now answers timestamp lookups: see the docstring"
    assert not TIMESTAMP_LOOKUP["mock"]


def test_an_interrupted_rewind_keeps_the_lease_until_it_is_run_again(kafka_cluster: MockKafkaCluster, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The truncate fails after the new txid is committed: the lease stays with the rewind (a service would be
    refused), and running the same rewind again completes it."""
    import app.commands.rewind as rewind_command

    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)

    def broken(compiled: object) -> list[str]:
        raise OSError("disk gone")

    monkeypatch.setattr(rewind_command, "_truncate", broken)
    argv = ("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest", "--reset-state", "--yes-i-know",
            "--owner", "ops-1")
    r = cli(*argv)
    assert r.code == 1
    assert "rewind interrupted after its first write (OSError: disk gone)" in r.err
    assert _store(path).lease_info().owner == "ops-1"
    service = pipeline_coordinator(path, owner="pod-1")
    with pytest.raises(LeaseHeldError):
        service.start()
    service.close(release=False)
    monkeypatch.undo()
    r = cli(*argv)
    assert r.code == 0, r.err
    store = _store(path)
    assert store.lease_info() is None
    assert [a["done"] for a in read_rewinds(store)] == [False, True]
    assert read_progress(store).committed_txid == 3  # the interrupted rewind's txid 2 stays below the retry's
    run_pipeline(path)
    assert _counts(path) == {"x": 3}


def test_a_topic_dropped_from_the_config_keeps_its_position_until_a_rewind_forgets_it(
        kafka_cluster: MockKafkaCluster, tmp_path: Path) -> None:
    """Status shows the dropped topic's partition as kept, not read now; the same config back reads nothing twice;
    only ``rewind --forget`` takes the position away (and then the topic starts from the first poll again)."""
    old, new = unique_topic("rw"), unique_topic("rw")
    for t in (old, new):
        kafka_cluster.create_topic(t, 1)
    produce(kafka_cluster.bootstrap_servers(), old, [(0, b"x")] * 3)
    produce(kafka_cluster.bootstrap_servers(), new, [(0, b"y")] * 2)
    state = {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")}
    before = write_config(tmp_path / "old.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=old, state=state)
    after = write_config(tmp_path / "new.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=new, state=state)
    run_pipeline(before)
    run_pipeline(after)
    r = cli("status", "--config", str(after), "--json")
    assert r.code == 0, r.err
    [s] = json.loads(r.out)
    assert sorted(s["partitions"], key=lambda row: row["partition"] != f"{old}:0") == [
        {"partition": f"{old}:0", "committed_next_offset": 3, "end_offset": None, "lag": None, "read_now": False},
        {"partition": f"{new}:0", "committed_next_offset": 2, "end_offset": 2, "lag": 0, "read_now": True}]
    assert f"kept:      {old}:0: not read now" in cli("status", "--config", str(after)).out
    run_pipeline(before)
    assert _counts(before) == {"x": 3, "y": 2}  # the old topic continued from its kept position

    r = cli("rewind", "--config", str(after), "--pipeline", "wc", "--forget", "nope")
    assert r.code == 2
    assert "no stored position of topic nope" in r.err
    r = cli("rewind", "--config", str(after), "--pipeline", "wc", "--forget", old)
    assert r.code == 0, r.err
    assert f"positions forgotten: {old}:0" in r.out
    plan = read_progress(_store(after)).committed_plan
    assert plan is not None
    assert set(plan.partitions) == {Partition(new, 0)}
    assert read_rewinds(_store(after))[-1]["forgotten"] == [f"{old}:0"]
    run_pipeline(before)
    assert _counts(before) == {"x": 6, "y": 2}  # forgotten: read again from the first poll (earliest)


def test_a_release_the_store_cannot_decide_is_told_and_the_rewind_stands(
        kafka_cluster: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A store that cannot tell whether it released the lease raises a state error: the finished rewind still
    succeeds, and a warning says the lease may be held until its TTL runs out."""
    from states.errors import StateError
    from states.sqlite.txstate import SqliteTransactionalStateStore

    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    produce(kafka_cluster.bootstrap_servers(), topic, [(0, b"x")] * 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)

    def undecided(self: object, owner: str, epoch: int) -> None:
        raise StateError("release of the lease: undecided after 8 attempts")

    monkeypatch.setattr(SqliteTransactionalStateStore, "release_lease", undecided)
    with caplog.at_level(logging.WARNING, logger="app.rewind"):
        r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest", "--yes-i-know",
                "--owner", "ops-1")
    assert r.code == 0, r.err
    assert any("may still be held" in m and "ops-1" in m for m in caplog.messages), caplog.messages
    assert [a["done"] for a in read_rewinds(_store(path))] == [True]


class _Killed(BaseException):
    """The process dies here: not an Exception, so the coordinator neither retries nor marks anything."""


class _DiesAfterFirstWrite:
    """A map state whose process is killed after its first multi_update is stored: a commit cut in the middle."""

    def __init__(self, state: Any) -> None:
        self._state, self.writes = state, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._state, name)

    def multi_update(self, keys: Any, updaters: Any) -> Any:
        if self.writes:
            raise _Killed
        self.writes += 1
        return self._state.multi_update(keys, updaters)


def _killed_mid_commit(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the pipeline until its next txid F has frozen its plan and stored its first key, then 'kill' it: F stays
    frozen, not committed, with one key holding F. The lease is given up as its expiry would."""
    import app.topology.local

    monkeypatch.setattr(app.topology.local, "CHUNK", 1)  # one key per write, so the kill lands between two keys
    coordinator = pipeline_coordinator(path, owner="killed-pod")
    executor = coordinator.executor
    assert isinstance(executor, LocalExecutor)
    dying = _DiesAfterFirstWrite(executor.sinks[0].state)
    executor.sinks = [replace(executor.sinks[0], state=dying)]
    try:
        with pytest.raises(_Killed):
            coordinator.run_until_idle()
    finally:
        coordinator.close()
        forget_opened()
    monkeypatch.undo()
    assert dying.writes == 1


def _with_frozen_partly_committed_txid(kafka_cluster: MockKafkaCluster, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, list[bytes]]:
    """Txid 1 committed (x y three times), txid 2 frozen over two more records and killed after writing key x."""
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 1)
    bootstrap = kafka_cluster.bootstrap_servers()
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    values = [b"x y"] * 3
    produce(bootstrap, topic, [(0, v) for v in values])
    assert run_pipeline(path) == 1
    produce(bootstrap, topic, [(0, b"x y")] * 2)
    values += [b"x y"] * 2
    _killed_mid_commit(path, monkeypatch)
    prog = read_progress(_store(path))
    assert (prog.committed_txid, prog.frozen_txids) == (1, (2,))
    assert _counts(path) == {"x": 5, "y": 3}  # x holds txid 2 already, y not yet
    return path, topic, values


@pytest.mark.parametrize("form", ["offsets", "forget", "earliest", "latest"])
def test_rewind_without_reset_is_refused_while_a_txid_is_frozen_uncommitted(
        kafka_cluster: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """A frozen txid F may have written some keys: a rewind planning from the last committed plan would read F's
    records again as a newer txid, counting them twice in every key F wrote. Refused (exit 3), nothing written;
    running the service once commits F, and then the same rewind goes through."""
    path, topic, values = _with_frozen_partly_committed_txid(kafka_cluster, tmp_path, monkeypatch)
    args = {"offsets": ("--to", f"offsets:{topic}:0=3"), "forget": ("--forget", topic),
            "earliest": ("--to", "earliest"), "latest": ("--to", "latest")}[form]
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", *args)
    assert r.code == 3, (r.out, r.err)
    [line] = r.err.strip().splitlines()
    assert "txid 2 is frozen but not committed" in line
    assert "run the service once" in line
    assert "--reset-state" in line
    store = _store(path)
    assert read_rewinds(store) == []
    assert store.lease_info() is None
    prog = read_progress(store)
    assert (prog.committed_txid, prog.frozen_txids) == (1, (2,))

    assert run_pipeline(path) == 1  # the replay of txid 2, exactly
    assert _counts(path) == words_of(values)
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", *args)
    assert r.code == 0, r.err
    assert "rewound as txid 3" in r.out


def test_a_rewind_to_the_committed_position_never_counts_a_frozen_txid_twice(
        kafka_cluster: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The double count the refusal prevents: rewinding to where the last committed txid ended (nothing read
    again, as the operator sees it) and running on must leave every key counted once."""
    path, topic, values = _with_frozen_partly_committed_txid(kafka_cluster, tmp_path, monkeypatch)
    cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", f"offsets:{topic}:0=3")
    run_pipeline(path)
    assert _counts(path) == words_of(values)


def test_a_rewind_with_reset_state_recounts_over_a_frozen_uncommitted_txid(
        kafka_cluster: MockKafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--reset-state empties the tables F wrote into: allowed, above F, and the recount is exact."""
    path, _, values = _with_frozen_partly_committed_txid(kafka_cluster, tmp_path, monkeypatch)
    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", "earliest", "--reset-state", "--yes-i-know")
    assert r.code == 0, r.err
    assert "rewound as txid 3" in r.out
    assert _counts(path) == {}
    run_pipeline(path)
    assert _counts(path) == words_of(values)
    assert read_progress(_store(path)).committed_txid == 4


def test_a_rewind_keeps_the_topic_id_of_every_position_it_leaves_where_it_was(kafka_cluster: MockKafkaCluster,
                                                                             tmp_path: Path) -> None:
    """A position the rewind does not move still belongs to the log it was read from: it keeps that log's topic
    id, so a topic re-created meanwhile is still told apart; a moved position carries none (the next plan adopts
    the current log's id)."""
    kafka_cluster.set_controller(kafka_cluster.broker_ids[0])  # the mock answers topic ids
    topic = unique_topic("rw")
    kafka_cluster.create_topic(topic, 2)
    produce(kafka_cluster.bootstrap_servers(), topic, [(i % 2, b"x y") for i in range(8)])
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_cluster.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    run_pipeline(path)
    committed = read_progress(_store(path)).committed_plan
    assert committed is not None
    ids = {m.partition_id: m.topic_id for m in committed.partitions.values()}
    assert None not in ids.values()

    r = cli("rewind", "--config", str(path), "--pipeline", "wc", "--to", f"offsets:{topic}:0=1", "--reset-state",
            "--yes-i-know")
    assert r.code == 0, r.err
    plan = read_progress(_store(path)).committed_plan
    assert plan is not None
    kept = {m.partition_id: (m.next_offset, m.topic_id) for m in plan.partitions.values()}
    assert kept == {Partition(topic, 0): (1, None), Partition(topic, 1): (4, ids[Partition(topic, 1)])}
