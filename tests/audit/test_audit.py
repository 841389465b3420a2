"""``audit`` on the real servers: a clean run audits equal; planted faults are found with the right key and txid;
a source that no longer holds the start is refused naming the partitions.

Faults are planted by writing the stored rows directly, as a bug would have left them: a txid's partial
applied twice on top of itself (a txid committed twice), a txid's partial lost, a key's row lost, a
hand-edited value. The ground truth is the words produced here, never what the pipeline stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.config import compile_pipeline, load
from app.coordinator.progress import read_progress
from states.values import OpaqueValue
from tests.commands.backends import STATE_BACKENDS, state_section
from tests.commands.helpers import WORDS_SPEC, cli, forget_opened, run_pipeline, words_of, write_config
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce

pytestmark = pytest.mark.slow  # a Spark session per audit process


def _pipeline(kafka_peer: KafkaPeer, backend: str, request: pytest.FixtureRequest, tmp_path: Path,
              records: int = 120) -> tuple[Path, Any]:
    topic = unique_topic("audit")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    state, cassandra = state_section(backend, request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, state=state, cassandra=cassandra,
                        spout={"topics": [topic], "first_poll": "earliest", "discovery_interval_s": 0,
                               "caps": {"per_partition": 20, "per_batch": 30}})
    produced = produce(bootstrap, topic, [(i % 2, f"w{i % 7} w{i % 3} common".encode()) for i in range(records)])
    assert run_pipeline(path) > 1
    return path, produced


def _audit(path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    r = cli("audit", "--config", str(path), "--pipeline", "wc", "--json", *extra)
    return r.code, (json.loads(r.out) if r.out.strip() else {}), r.err


def _backing(path: Path) -> Any:
    forget_opened()
    return compile_pipeline(load(path), "wc").state.backing_map(WORDS_SPEC, create=False)


@pytest.mark.parametrize("backend", STATE_BACKENDS)
def test_clean_run_audits_equal_and_planted_faults_are_found_by_key_and_txid(
        kafka_peer: KafkaPeer, backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path, produced = _pipeline(kafka_peer, backend, request, tmp_path)
    truth = words_of([r.value for r in produced])
    code, report, err = _audit(path)
    assert code == 0, err
    [table] = report["tables"]
    assert report["records"] == len(produced)
    assert report["differences"] == 0
    assert (table["checked"], table["equal"], table["keys"]) == (len(truth), len(truth), [])

    backing = _backing(path)
    committed = read_progress(compile_pipeline(load(path), "wc").store()).committed_txid
    stored = dict(zip(["w0", "w1", "w2", "w3"], backing.multi_get([("w0",), ("w1",), ("w2",), ("w3",)]), strict=True))
    twice, lost, edited, gone = (stored[w] for w in ("w0", "w1", "w2", "w3"))
    assert all(v.prev is not None for v in (twice, lost))  # written by two txids at least
    # w0: its last txid's partial applied twice; w1: its last txid's partial lost; w2: a hand edit; w3: row lost
    backing.multi_put([("w0",), ("w1",), ("w2",)], [
        OpaqueValue(twice.txid, twice.curr + (twice.curr - twice.prev), twice.curr),
        OpaqueValue(lost.txid, lost.prev, lost.prev),
        OpaqueValue(edited.txid, 999, edited.prev)])
    _delete(path, backend, "w3")
    metrics = tmp_path / "audit.prom"
    code, report, err = _audit(path, "--metrics-file", str(metrics))
    assert code == 5, err
    text = metrics.read_text()
    assert 'trident_audit_last_result{pipeline="wc"} 0.0' in text
    assert 'trident_audit_last_differences{pipeline="wc"} 4.0' in text
    assert f'trident_audit_last_txid{{pipeline="wc"}} {committed}.0' in text
    [table] = report["tables"]
    found = {k["key"][0]: (k["outcome"], k["expected"], k["stored"], k["stored_txid"]) for k in table["keys"]}
    assert found == {
        "w0": ("differs", truth["w0"], truth["w0"] + twice.curr - twice.prev, twice.txid),
        "w1": ("differs", truth["w1"], lost.prev, lost.txid),
        "w2": ("differs", truth["w2"], 999, edited.txid),
        "w3": ("missing", truth["w3"], None, None)}
    assert (table["checked"], table["equal"]) == (len(truth), len(truth) - 4)
    assert report["at_txid"] == committed
    assert gone.curr == truth["w3"]

    # an extra key: stored, never in the source
    backing.multi_put([("ghost",)], [OpaqueValue(committed, 3, None)])
    code, report, _ = _audit(path, "--keys", "ghost", "common")
    assert code == 5
    [table] = report["tables"]
    assert [(k["key"], k["outcome"], k["stored"]) for k in table["keys"]] == [(["ghost"], "extra", 3)]
    assert table["checked"] == 2
    assert table["equal"] == 1


def test_a_source_that_no_longer_holds_the_start_is_refused_naming_the_partitions(
        kafka_peer: KafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path, produced = _pipeline(kafka_peer, "sqlite", request, tmp_path)
    topic = produced[0].topic
    kafka_peer.delete_records(topic, 1, 5)
    code, report, err = _audit(path)
    assert code == 2
    assert report == {}
    refusal = err.strip().splitlines()[-1]  # one line (the lines before it are progress)
    assert refusal.startswith("audit: refused: the source no longer holds")
    assert f"{topic}:1 needs offset 0 but starts at 5" in refusal
    assert f"{topic}:0" not in refusal
    assert "--since txid 1 is the earliest that can still be audited" in refusal


def test_a_non_transactional_state_is_refused(kafka_peer: KafkaPeer, request: pytest.FixtureRequest,
                                              tmp_path: Path) -> None:
    topic = unique_topic("audit")
    kafka_peer.create_topic(topic, 1)
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_peer.bootstrap_servers(), topic=topic,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"),
                               "kind": "non_transactional"}, accept_at_least_once=True)
    code, _, err = _audit(path)
    assert code == 2, err
    assert "non-transactional state keeps no txid per key" in err, err


def _delete(path: Path, backend: str, word: str) -> None:
    compiled = compile_pipeline(load(path), "wc")
    if backend == "sqlite":
        import sqlite3

        assert compiled.state.sqlite_path is not None
        conn = sqlite3.connect(compiled.state.sqlite_path)
        conn.execute("DELETE FROM word_counts WHERE word = ?", (word,))
        conn.commit()
        conn.close()
    else:
        from states.cassandra.session import shared_client
        from states.cassandra.shards import shard_of

        s = compiled.state.cassandra
        assert s is not None
        shards = compiled.state.shards_of("word_counts")
        where, values = ("shard = %s AND word = %s", (shard_of((word,), shards), word)) if shards else \
            ("word = %s", (word,))
        shared_client(s).session.execute(f"DELETE FROM {s.keyspace}.word_counts WHERE {where}", values)


def test_keys_written_again_since_the_audited_txid_are_compared_as_of_the_txid_before_from_prev(
        kafka_peer: KafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Audited as of an early txid after later txids wrote every key twice or more: each key stored by txid S is
    compared as of S - 1 (its prev against its value as of the audited txid plus the recount of the txids
    between), none skipped; a prev that is wrong is found, though the key's current value is right."""
    path, produced = _pipeline(kafka_peer, "sqlite", request, tmp_path, records=240)
    committed = read_progress(compile_pipeline(load(path), "wc").store()).committed_txid
    assert committed >= 6
    code, report, err = _audit(path, "--at", "2")
    assert code == 0, err
    [table] = report["tables"]
    assert report["at_txid"] == 2
    truth = words_of([r.value for r in produced])
    backing = _backing(path)
    stored = dict(zip(truth, backing.multi_get([(w,) for w in truth]), strict=True))
    assert report["reread_at_txids"] == sorted({v.txid - 1 for v in stored.values() if v.txid > 3})
    assert committed - 1 in report["reread_at_txids"]  # 'common' is in every record: stored by the last txid
    assert table["skipped"] == table["differs"] == 0
    assert table["checked"] == table["equal"] == len(truth)
    assert f"comparing them as of txid {committed - 1}" in err

    common = stored["common"]
    backing.multi_put([("common",)], [OpaqueValue(common.txid, common.curr, common.prev + 1)])
    code, report, err = _audit(path, "--at", "2")
    assert code == 5, err
    [table] = report["tables"]
    assert [(k["key"], k["outcome"], k["expected"], k["stored"], k["stored_txid"]) for k in table["keys"]] == \
        [(["common"], "differs", common.prev, common.prev + 1, committed)]
    assert f"compared as of txid {committed - 1}" in table["keys"][0]["reason"]


def test_since_audits_what_later_txids_added_against_the_values_as_of_both(
        kafka_peer: KafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    path, _ = _pipeline(kafka_peer, "sqlite", request, tmp_path)
    committed = read_progress(compile_pipeline(load(path), "wc").store()).committed_txid
    code, report, err = _audit(path, "--since", str(committed - 1))
    assert code == 0, err
    [table] = report["tables"]
    assert report["since_txid"] == committed - 1
    assert table["differs"] == table["missing"] == table["extra"] == 0
    assert table["equal"] > 0
    # a hand edit of a key the last txid wrote is found by --since too
    backing = _backing(path)
    [common] = backing.multi_get([("common",)])
    assert common.txid == committed
    backing.multi_put([("common",)], [OpaqueValue(common.txid, common.curr + 1, common.prev)])
    code, report, _ = _audit(path, "--since", str(committed - 1), "--keys", "common")
    assert code == 5
    [table] = report["tables"]
    assert [(k["key"], k["outcome"], k["expected"], k["stored"], k["stored_txid"]) for k in table["keys"]] == \
        [(["common"], "differs", common.curr, common.curr + 1, committed)]


def _recreate(kafka_peer: KafkaPeer, topic: str, partitions: int) -> None:
    """Delete and create ``topic`` again (deletion completes in the background: retry until it is accepted)."""
    import time

    from confluent_kafka import KafkaException

    kafka_peer.delete_topic(topic)
    deadline = time.monotonic() + 60
    while True:
        try:
            kafka_peer.create_topic(topic, partitions)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        else:
            return


def test_after_a_data_loss_skip_onto_a_new_log_a_full_audit_is_refused_and_since_covers_the_new_log(
        kafka_peer: KafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The topic re-created with fewer records than the stored positions, and read from its new start under
    data_loss: skip: a full audit would compare new-log offsets with what the old log added, so it is refused in
    one line naming the move; --since the txid before the move recounts the new log from its start, equal."""
    topic = unique_topic("audit-skip")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    state, _ = state_section("sqlite", request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, state=state,
                        spout={"topics": [topic], "first_poll": "earliest", "discovery_interval_s": 0,
                               "data_loss": "skip", "caps": {"per_partition": 20, "per_batch": 30}})
    old = produce(bootstrap, topic, [(i % 2, f"w{i % 5} old".encode()) for i in range(80)])
    assert run_pipeline(path) > 1
    before = read_progress(compile_pipeline(load(path), "wc").store()).committed_txid
    _recreate(kafka_peer, topic, 2)
    fresh = produce(bootstrap, topic, [(i % 2, f"w{i % 3} new".encode()) for i in range(16)])
    assert run_pipeline(path) >= 1
    moved = before + 1

    code, report, err = _audit(path)
    assert code == 2, err
    assert report == {}
    refusal = err.strip().splitlines()[-1]
    assert refusal.startswith("audit: refused: ")
    assert f"moved onto a new log at txid {moved}" in refusal
    assert f"--since txid {moved - 1}" in refusal

    code, report, err = _audit(path, "--since", str(moved - 1))
    assert code == 0, err
    [table] = report["tables"]
    assert report["records"] == len(fresh)
    assert {r["partition"]: r["from_offset"] for r in report["ranges"]} == {f"{topic}:0": 0, f"{topic}:1": 0}
    # every stored key compared: those the new log wrote against the recount, the others unchanged since
    assert table["checked"] == table["equal"] == len(words_of([r.value for r in (*old, *fresh)]))
    assert report["differences"] == 0
