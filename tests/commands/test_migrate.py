"""``migrate``: a pipeline's Cassandra table copied into another layout, exactly, resumably, verified, then switched.

Ground truth is counted here from what the broker acknowledged (or, for the copy itself, from the rows this
test wrote), never from what the pipeline stored. The copy reads write times and token order, which only a
real Cassandra answers: these tests need one (``CASSANDRA_CONTACT_POINTS``; skipped with the reason without,
failed under ``REQUIRE_REAL_PEERS=1``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from app.config import compile_pipeline, load
from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.coordinator.progress import ProgressLog, read_progress
from app.migrations import COPYING, DONE, read_migration
from app.spark.state_tables import StateTables
from app.topology.local import LocalExecutor, Sink
from states.aggregators import Count
from states.cassandra.session import shared_client
from states.errors import LeaseHeldError, SchemaMismatchError
from states.values import OpaqueValue
from tests.commands.helpers import WORDS_SPEC, cli, forget_opened, words_of, write_config
from tests.commands.test_rewind import _killed_mid_commit
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce
from tests.states.backends import cassandra_settings

ROOT = Path(__file__).resolve().parents[2]


def _config(path: Path, settings: Any, shards: int, *, bootstrap: str = "127.0.0.1:1", topic: str = "unused",
            table: str = "word_counts") -> Path:
    return write_config(path, bootstrap=bootstrap, topic=topic, state={"backend": "cassandra", "table": table},
                        cassandra=settings, cassandra_extra={"shards": shards})


def _switch(path: Path, table: str, shards: int) -> None:
    """What the operator does after a migration: the config names the new table and shard count."""
    doc = yaml.safe_load(path.read_text())
    doc["pipelines"][0]["state"]["table"] = table
    doc["cassandra"]["shards"] = shards
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _run(path: Path, owner: str = "test-service") -> int:
    """Run the config's pipeline until idle (the batch protocol and the state writes, words counted in Python)
    into the table the config names."""
    config = load(path)
    compiled = compile_pipeline(config, "wc")
    spout = compiled.topology.spout
    assert spout is not None
    state = compiled.state.make_state(replace(WORDS_SPEC, table=config.pipeline("wc").table()))
    executor = LocalExecutor(spout.emitter(), [Sink(state, Count(), key=lambda w: (w,))],
                             flat_map=lambda r: (r.value or b"").decode().split())
    cfg = CoordinatorConfig(caps=compiled.coordinator.caps, max_pending=1, owner=owner, idle_sleep_s=0.01)
    coordinator = Coordinator("wc", spout, executor, compiled.store(), cfg)
    try:
        return coordinator.run_until_idle()
    finally:
        coordinator.close()
        forget_opened()


def _rows(settings: Any, table: str) -> dict[str, tuple[Any, ...]]:
    """Every row of a word-count table as word -> (txid, count, prev_count), read with plain CQL."""
    rows = shared_client(settings).session.execute(
        f"SELECT word, txid, count, prev_count FROM {settings.keyspace}.{table}", timeout=60)
    out: dict[str, tuple[Any, ...]] = {}
    for r in rows:
        values = (r["word"], r["txid"], r["count"], r["prev_count"])
        assert values[0] not in out, f"{values[0]!r} twice in {table}"
        out[values[0]] = values[1:]
    return out


def _counts(settings: Any, table: str) -> dict[str, int]:
    return {w: row[1] for w, row in _rows(settings, table).items()}


def _service_check(path: Path) -> None:
    """The check the service makes before its first txid (app.spark.state_tables), on the config at ``path``."""
    forget_opened()
    compiled = compile_pipeline(load(path), "wc")
    spec = replace(WORDS_SPEC, table=load(path).pipeline("wc").table())
    sinks = [SimpleNamespace(sink=sink, spec=spec) for _, sink in compiled.topology.sinks]
    store = compiled.store()
    StateTables(sinks).check(read_progress(store).committed_txid, ProgressLog(store, epoch=0))  # type: ignore[arg-type]


@pytest.fixture
def real_cassandra(request: pytest.FixtureRequest) -> Any:
    return cassandra_settings(request, "real")


@pytest.mark.parametrize(("before", "after"), [(0, 16), (16, 0), (16, 4)])
def test_a_migrated_table_holds_every_row_and_the_service_counts_on_exactly(
        kafka_peer: KafkaPeer, real_cassandra: Any, tmp_path: Path, before: int, after: int) -> None:
    """Count A with one layout, migrate to another, switch the config, count B: the new table equals A+B as the
    producer sent them; the old table is kept as it was; the old config is refused by the service's check."""
    topic = unique_topic("mig")
    kafka_peer.create_topic(topic, 2)
    bootstrap = kafka_peer.bootstrap_servers()
    path = _config(tmp_path / "c.yaml", real_cassandra, before, bootstrap=bootstrap, topic=topic)
    a = produce(bootstrap, topic, [(i % 2, f"alpha w{i % 7} w{i % 3}".encode()) for i in range(60)])
    assert _run(path) > 0
    old_rows = _rows(real_cassandra, "word_counts")
    assert {w: r[1] for w, r in old_rows.items()} == words_of([r.value for r in a])

    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", str(after), "--page-size", "3")
    assert r.code == 0, r.err
    new_table = f"word_counts_s{after}"
    assert f"copied to {real_cassandra.keyspace}.{new_table}" in r.out
    assert f"state.table: {new_table} and cassandra.shards: {after}" in r.out
    assert _rows(real_cassandra, new_table) == old_rows  # (txid, count, prev) of every key, exactly
    with pytest.raises(SchemaMismatchError, match=f"migrated to {real_cassandra.keyspace}.{new_table}"):
        _service_check(path)  # the old config: refused, naming what to set

    _switch(path, new_table, after)
    _service_check(path)
    b = produce(bootstrap, topic, [(i % 2, f"bravo w{i % 5}".encode()) for i in range(40)])
    assert _run(path) > 0
    assert _counts(real_cassandra, new_table) == words_of([r.value for r in a + b])
    assert _rows(real_cassandra, "word_counts") == old_rows  # kept, untouched


def _seed(settings: Any, shards: int, n: int, ttl_s: int | None = None) -> dict[str, tuple[Any, ...]]:
    """``n`` keys written straight into the table (txids 1-9, some without a prev), as the truth to compare."""
    from states.cassandra import CassandraBackingMap

    seeded = replace(settings, shards=shards)
    table = CassandraBackingMap(seeded, replace(WORDS_SPEC, ttl_s=ttl_s))
    truth: dict[str, tuple[Any, ...]] = {}
    keys, values = [], []
    for i in range(n):
        txid = 1 + i % 9
        value = OpaqueValue(txid, i * 3, None if i % 4 == 0 else i)
        keys.append((f"k{i:06d}",))
        values.append(value)
        truth[f"k{i:06d}"] = (value.txid, value.curr, value.prev)
    for at in range(0, n, 500):
        table.multi_put(keys[at:at + 500], values[at:at + 500])
    return truth


@pytest.mark.parametrize(("before", "after"), [(0, 8), (8, 0)])
def test_a_migration_killed_mid_copy_resumes_and_loses_or_duplicates_nothing(
        real_cassandra: Any, tmp_path: Path, before: int, after: int) -> None:
    """SIGKILL ``python -m app migrate`` after some pages (from 8 shards: inside a partition of 750 rows); the
    service refuses to start meanwhile; run again, it resumes from the recorded token and the copy equals what was
    written, write times included."""
    truth = _seed(real_cassandra, before, 6000)
    path = _config(tmp_path / "c.yaml", real_cassandra, before)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "app", "migrate", "--config", str(path), "--pipeline", "wc",
                             "--shards", str(after), "--page-size", "100"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    store = compile_pipeline(load(path), "wc").store()
    where = f"{real_cassandra.keyspace}.word_counts"
    deadline = time.monotonic() + 120
    doc = None
    while time.monotonic() < deadline and proc.poll() is None:
        doc = read_migration(store, where)
        if doc is not None and doc["copied"] >= 1500:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    forget_opened()
    doc = read_migration(compile_pipeline(load(path), "wc").store(), where)
    assert doc is not None
    assert doc["state"] == COPYING
    assert 1500 <= doc["copied"] < len(truth)
    with pytest.raises(SchemaMismatchError, match="is being migrated"):
        _service_check(path)  # no service writes into the old table while its copy is unfinished

    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", str(after), "--page-size", "100")
    assert r.code == 0, r.err
    assert f"resuming the copy of {where}" in r.err
    assert f": {len(truth)} rows, checksum" in r.out
    forget_opened()
    doc = read_migration(compile_pipeline(load(path), "wc").store(), where)
    assert doc is not None
    assert doc["state"] == DONE
    # resumed, not started over: copied again at most a partition (750 rows from 8 shards) and a page
    assert doc["copied"] <= len(truth) + 1000
    assert _rows(real_cassandra, f"word_counts_s{after}") == truth
    session = shared_client(real_cassandra).session
    ks = real_cassandra.keyspace
    written = {r["word"]: r["at"] for r in session.execute(f"SELECT word, writetime(txid) AS at FROM {ks}.word_counts")}
    copied = {r["word"]: r["at"] for r in session.execute(f"SELECT word, writetime(txid) AS at FROM {ks}.word_counts_s{after}")}
    assert copied == written  # the copy's cells are as old as the originals: a later commit always wins

    again = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", str(after))
    assert again.code == 0, again.err  # done is done: nothing copied again
    assert "already: nothing to copy" in again.err
    other = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "2")
    assert other.code == 2, other.err  # the config still names the old table: it says what to set
    assert f"set state.table: word_counts_s{after} in the config, and cassandra.shards: {after} if" in other.err


def test_a_frozen_txid_copied_mid_flight_replays_exactly_on_the_new_table(
        kafka_peer: KafkaPeer, real_cassandra: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Txid 2 frozen and killed after writing key x only; migrate (allowed: the copy keeps txid and prev); the
    service replays txid 2 on the new table: every key counted once."""
    topic = unique_topic("migf")
    kafka_peer.create_topic(topic, 1)
    bootstrap = kafka_peer.bootstrap_servers()
    path = _config(tmp_path / "c.yaml", real_cassandra, 0, bootstrap=bootstrap, topic=topic)
    values = [b"x y"] * 3
    produce(bootstrap, topic, [(0, v) for v in values])
    assert _run(path) == 1
    produce(bootstrap, topic, [(0, b"x y")] * 2)
    values += [b"x y"] * 2
    _killed_mid_commit(path, monkeypatch)
    prog = read_progress(compile_pipeline(load(path), "wc").store())
    assert (prog.committed_txid, prog.frozen_txids) == (1, (2,))
    assert _counts(real_cassandra, "word_counts") == {"x": 5, "y": 3}  # x holds txid 2 already, y not yet

    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "4")
    assert r.code == 0, r.err
    assert _rows(real_cassandra, "word_counts_s4") == _rows(real_cassandra, "word_counts")
    _switch(path, "word_counts_s4", 4)
    assert _run(path) == 1  # the replay of txid 2, exactly
    assert _counts(real_cassandra, "word_counts_s4") == words_of(values)


def test_rows_with_a_time_to_live_keep_what_is_left_of_it(real_cassandra: Any, tmp_path: Path) -> None:
    """A ``ttl_s`` table: each copied row expires when its original would (its remaining TTL), not later or never."""
    truth = _seed(real_cassandra, 0, 200, ttl_s=3600)
    path = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="unused", cassandra=real_cassandra,
                        state={"backend": "cassandra", "table": "word_counts", "ttl_s": 3600},
                        cassandra_extra={"shards": 0})
    time.sleep(2)  # the originals' clocks have run: a copy that restarted them would show more time left
    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "4")
    assert r.code == 0, r.err
    assert _rows(real_cassandra, "word_counts_s4") == truth
    session, ks = shared_client(real_cassandra).session, real_cassandra.keyspace
    left = {r["word"]: r["left"] for r in session.execute(f"SELECT word, ttl(txid) AS left FROM {ks}.word_counts")}
    copied = {r["word"]: r["left"] for r in session.execute(f"SELECT word, ttl(txid) AS left FROM {ks}.word_counts_s4")}
    assert copied.keys() == left.keys()
    assert all(left[w] - 30 <= copied[w] <= left[w] + 1 for w in left), (left, copied)
    assert max(copied.values()) <= 3598


def test_bad_input_is_one_line_and_exit_2(real_cassandra: Any, tmp_path: Path) -> None:
    """Unknown pipeline, a count out of range, the layout it has, a backend without layouts, no config: exit 2."""
    path = _config(tmp_path / "c.yaml", real_cassandra, 4)
    sqlite = write_config(tmp_path / "s.yaml", bootstrap="127.0.0.1:1", topic="t",
                          state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    cases = {
        ("--config", str(path), "--pipeline", "nope", "--shards", "8"): "no such pipeline",
        ("--config", str(path), "--pipeline", "wc", "--shards", "5000"): "--shards 5000",
        ("--config", str(path), "--pipeline", "wc", "--shards", "-1"): "--shards -1",
        ("--config", str(path), "--pipeline", "wc", "--shards", "4"): "already laid out as --shards 4",
        ("--config", str(sqlite), "--pipeline", "wc", "--shards", "4"): "its state is on sqlite",
        ("--config", str(path), "--pipeline", "wc", "--shards", "8"): "nothing to migrate",  # no table yet
        ("--pipeline", "wc", "--shards", "8"): "--config",
    }
    for argv, expected in cases.items():
        r = cli("migrate", *argv)
        assert r.code == 2, (argv, r.out, r.err)
        [line] = r.err.strip().splitlines()[-1:]
        assert expected in line, (argv, r.err)
        if "--config" in argv:
            assert len(r.err.strip().splitlines()) == 1, r.err
    assert "example:\n  python -m app migrate --config" in cli("migrate", "--help").out


def test_migrate_is_refused_while_a_service_holds_the_lease(real_cassandra: Any, tmp_path: Path) -> None:
    """A live service holds the lease: refused with its name (exit 3, as every command refused by a lease), and
    nothing recorded or created."""
    _seed(real_cassandra, 0, 10)
    path = _config(tmp_path / "c.yaml", real_cassandra, 0)
    store = compile_pipeline(load(path), "wc").store()
    store.acquire_lease("service-pod-1", 30.0)
    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "8")
    assert r.code == 3, r.err
    [line] = r.err.strip().splitlines()
    assert "the lease is held by 'service-pod-1'" in line
    assert read_migration(store, f"{real_cassandra.keyspace}.word_counts") is None
    tables = shared_client(real_cassandra).session.execute(  # the server's schema, not a client's cached view of it
        "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (real_cassandra.keyspace,))
    assert "word_counts_s8" not in {r["table_name"] for r in tables}
    with pytest.raises(LeaseHeldError):
        store.acquire_lease("another", 30.0)


def test_a_copy_that_does_not_match_is_never_switched(real_cassandra: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy that lost a row fails its verification (exit 1): the migration stays unfinished (the service still
    refuses the old table and the new one is not the pipeline's); run again, every row is copied and it switches."""
    from states.cassandra import migration

    truth = _seed(real_cassandra, 0, 50)
    path = _config(tmp_path / "c.yaml", real_cassandra, 0)
    write = migration.TableCopy._write

    def lossy(self: Any, insert: Any, page: list[tuple[Any, ...]]) -> int:
        return write(self, insert, page[1:])  # the first row of every page goes missing

    monkeypatch.setattr(migration.TableCopy, "_write", lossy)
    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "2", "--page-size", "20")
    assert r.code == 1, r.err
    [line] = r.err.strip().splitlines()[-1:]
    assert "does not match (47 rows" in line
    assert "nothing switched" in line
    store = compile_pipeline(load(path), "wc").store()
    where = f"{real_cassandra.keyspace}.word_counts"
    doc = read_migration(store, where)
    assert doc is not None
    assert (doc["state"], doc["after_token"]) == (COPYING, None)
    assert f"{real_cassandra.keyspace}.word_counts_s2" not in ProgressLog(store, epoch=0).tables()
    with pytest.raises(SchemaMismatchError, match="is being migrated"):
        _service_check(path)

    monkeypatch.setattr(migration.TableCopy, "_write", write)
    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "2", "--page-size", "20")
    assert r.code == 0, r.err
    assert _rows(real_cassandra, "word_counts_s2") == truth
    assert f"{real_cassandra.keyspace}.word_counts_s2" in ProgressLog(store, epoch=0).tables()


@pytest.mark.slow
def test_the_service_refuses_the_old_table_and_counts_on_exactly_in_the_new_one(
        kafka_peer: KafkaPeer, real_cassandra: Any, tmp_path: Path) -> None:
    """``python -m app run`` (Spark) with the old config stops at once with exit 2 naming what to set; with the
    config switched to the migrated table (16 shards) it counts on, and the table equals the producer's truth."""
    from tests.service.helpers import ServiceProcess, free_port, word_count_config

    topic = unique_topic("migs")
    kafka_peer.create_topic(topic, 2)
    bootstrap, port = kafka_peer.bootstrap_servers(), free_port()
    s = real_cassandra
    cassandra = {"contact_points": list(s.contact_points), "port": s.port, "keyspace": s.keyspace, "shards": 0,
                 **({"local_dc": s.local_dc} if s.local_dc else {})}
    path = word_count_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, port=port, pipeline_id="wc",
                             state={"backend": "cassandra", "table": "word_counts"}, cassandra=cassandra)
    a = produce(bootstrap, topic, [(i % 2, f"alpha w{i % 7} w{i % 3}".encode()) for i in range(80)])
    assert _run(path) > 0
    r = cli("migrate", "--config", str(path), "--pipeline", "wc", "--shards", "16")
    assert r.code == 0, r.err

    service = ServiceProcess(path, tmp_path / "service.log", port).start()
    try:
        assert service.proc is not None
        assert service.proc.wait(300) == 2, service.tail()
        assert "set state.table: word_counts_s16 in the config, and cassandra.shards: 16 if" in service.tail()
        _switch(path, "word_counts_s16", 16)
        b = produce(bootstrap, topic, [(i % 2, f"bravo w{i % 5}".encode()) for i in range(50)])
        expected = dict(words_of([r.value for r in a + b]))
        service.start().wait_ready(300)
        deadline = time.monotonic() + 180
        while _counts(s, "word_counts_s16") != expected and time.monotonic() < deadline:
            service.check_alive()
            time.sleep(0.5)
        assert _counts(s, "word_counts_s16") == expected, service.tail()
        assert service.terminate() == 0
    finally:
        service.cleanup()
