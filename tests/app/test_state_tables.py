"""Which state tables a txid may create: a table that held committed state is never created again empty, while
a table that has had no txid yet (a new sink, a sink no key reached, a table made before tables were recorded)
is created or adopted, never taken for lost. SQLite files and the coordinator's real progress log."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.coordinator.progress import ProgressLog, record_rewind
from app.spark.state_tables import StateTables
from app.topology.batch import Batch
from spouts.metadata import BatchPlan
from states.errors import SchemaMismatchError, StateTableMissingError
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind

WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
ALERTS = MapSpec("alerts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


class Setup:
    """A SQLite factory, the pipeline's progress log in the same file, and sinks over ``specs``."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "state.db"
        self.factory = StateFactory(backend="sqlite", sqlite_path=str(self.path))
        self.store = self.factory.txstate_store("p")
        self.progress = ProgressLog(self.store, epoch=self.store.acquire_lease("test-owner", ttl_s=60))

    def tables(self, *specs: MapSpec) -> StateTables:
        sinks: Any = [SimpleNamespace(sink=SimpleNamespace(factory=self.factory), spec=s) for s in specs]
        return StateTables(sinks)

    def batch(self, txid: int) -> Batch:
        return Batch(txid, 1, BatchPlan(txid, {}), True, progress=self.progress)

    def present(self) -> set[str]:
        conn = sqlite3.connect(self.path)
        try:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()

    def drop(self, table: str) -> None:
        conn = sqlite3.connect(self.path)
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
        conn.close()
        self.factory.forget(WORDS if table == WORDS.table else ALERTS)


def test_the_first_txid_creates_and_records_every_table_and_a_dropped_one_is_then_lost(tmp_path: Path) -> None:
    """Txid 1 creates both tables, even for a sink it gives no key; dropped later, a table is
    StateTableMissingError at the next start, and nothing creates it again."""
    s = Setup(tmp_path)
    s.tables(WORDS, ALERTS).create(s.batch(1))
    assert {"word_counts", "alerts"} <= s.present()
    assert s.progress.tables() == {"word_counts", "alerts"}
    s.drop("alerts")
    restarted = s.tables(WORDS, ALERTS)
    with pytest.raises(StateTableMissingError) as e:
        restarted.check(5, s.progress)
    assert (e.value.table, e.value.committed_txid) == ("alerts", 5)
    assert restarted.committed_into(SimpleNamespace(sink=SimpleNamespace(factory=s.factory), spec=ALERTS),  # type: ignore[arg-type]
                                    s.batch(6)) == 5
    assert "alerts" not in s.present()


def test_a_sink_added_to_a_pipeline_with_committed_txids_gets_its_table(tmp_path: Path) -> None:
    """A pipeline that committed txids into ``word_counts`` gains a second sink: its start is no error, and its
    next txid creates and records the new table (before: StateTableMissingError, exit 2, on every start)."""
    s = Setup(tmp_path)
    s.tables(WORDS).create(s.batch(1))
    grown = s.tables(WORDS, ALERTS)
    grown.check(9, s.progress)
    grown.create(s.batch(10))
    assert "alerts" in s.present()
    assert s.progress.tables() == {"word_counts", "alerts"}


def test_a_table_made_before_tables_were_recorded_is_adopted_at_start(tmp_path: Path) -> None:
    """A table that exists but is not recorded (made by an earlier version) is recorded when the pipeline
    starts, so dropping it afterwards is caught; one that does not exist is simply created."""
    s = Setup(tmp_path)
    s.factory.make_state(WORDS, committed_txid=0)  # the earlier version's table, no record of it
    s.factory.forget(WORDS)
    s.tables(WORDS, ALERTS).check(20, s.progress)
    assert s.progress.tables() == {"word_counts"}
    s.drop("word_counts")
    with pytest.raises(StateTableMissingError):
        s.tables(WORDS).check(21, s.progress)


def test_after_a_reset_rewind_recorded_tables_may_be_created_again(tmp_path: Path) -> None:
    """A rewind with --reset-state empties the tables: until a txid commits after it, a recorded table that is
    missing is created again rather than lost."""
    s = Setup(tmp_path)
    s.tables(WORDS).create(s.batch(1))
    s.drop("word_counts")
    record_rewind(s.store, epoch=s.progress.epoch, txid=4, audit={"txid": 4, "reset_state": True, "done": True})
    tables = s.tables(WORDS)
    tables.check(4, s.progress)
    tables.create(s.batch(5))
    assert "word_counts" in s.present()


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "made-before-recording"])
def test_a_cassandra_table_of_another_shard_count_stops_the_start(request: pytest.FixtureRequest,
                                                                  recorded: bool) -> None:
    """A table created with 3 shards, the settings changed to 5: the start stops with SchemaMismatchError
    naming both counts (exit 2), before any txid, so an idle pipeline stops too; with the same count it starts."""
    from tests.states.backends import behaviour_kind, cassandra_settings

    settings = cassandra_settings(request, behaviour_kind(request), shards=3)
    factory = StateFactory(backend="cassandra", cassandra=settings)
    store = factory.txstate_store("p")
    progress = ProgressLog(store, epoch=store.acquire_lease("test-owner", ttl_s=60))

    def tables(f: StateFactory) -> StateTables:
        return StateTables([SimpleNamespace(sink=SimpleNamespace(factory=f), spec=WORDS)])  # type: ignore[list-item]

    if recorded:
        tables(factory).create(Batch(1, 1, BatchPlan(1, {}), True, progress=progress))
    else:
        factory.backing_map(WORDS)  # the table exists, no record of it
    tables(factory).check(1, progress)
    other = StateFactory(backend="cassandra", cassandra=replace(settings, shards=5))
    with pytest.raises(SchemaMismatchError, match=r"created with 3 shards, the settings say cassandra\.shards: 5"):
        tables(other).check(1, progress)
