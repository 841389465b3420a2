"""Latest-value upserts and tombstones through the map states, on every backend in ``backends.BACKING_MAPS``.

A stored upsert is ``(latest(amount), latest(name), latest(deleted))``, each stamped with its
record's place; a tombstone is a record whose ``deleted`` is true. What is checked: a tombstone
deletes the key for readers yet the row keeps its txid, so a replay of that txid is recognised
(opaque: recomputed from ``prev``; transactional: skipped), and an older record cannot revive it.
"""

from __future__ import annotations

from typing import Any

import pytest

from states.aggregators import Latest, combine_updater
from states.opaque import OpaqueMap
from states.reader import visible_value
from states.spec import DELETED_COLUMN, Column, MapSpec, StateKind
from states.stamped import Stamped
from states.transactional import TransactionalMap
from tests.states.backends import BACKING_MAPS, Backend

KEY = (Column("id", "text"),)
VALUES = (Column("amount", "bigint", stamped=True), Column("name", "text", stamped=True),
          Column(DELETED_COLUMN, "boolean", stamped=True))
SPECS = {kind: MapSpec(f"upsert_{kind.value}", kind, KEY, VALUES, tombstones=True)
         for kind in (StateKind.OPAQUE, StateKind.TRANSACTIONAL)}
MAPS = {StateKind.OPAQUE: OpaqueMap, StateKind.TRANSACTIONAL: TransactionalMap}


class Upsert:
    """The aggregator of the stored tuple, element by element (what the Spark plan composes)."""

    aggs = (Latest(), Latest(), Latest())

    def combine(self, a: Any, b: Any) -> Any:
        return tuple(x.combine(p, q) for x, p, q in zip(self.aggs, a, b, strict=True))

    def partial_of(self, column: Any) -> Any:
        return tuple(x.partial_of(v) for x, v in zip(self.aggs, column, strict=True))


def record(offset: int, amount: int | None, name: str | None, *, ts: int = 1_000, partition: int = 0) -> Any:
    """A batch partial from one record; ``amount`` None and ``name`` None with ``tombstone`` is a delete."""
    return (Stamped(ts, partition, offset, amount), Stamped(ts, partition, offset, name),
            Stamped(ts, partition, offset, False))


def tombstone(offset: int, *, ts: int = 1_000, partition: int = 0) -> Any:
    return (Stamped(ts, partition, offset, None), Stamped(ts, partition, offset, None),
            Stamped(ts, partition, offset, True))


@pytest.fixture(params=sorted(BACKING_MAPS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=[StateKind.OPAQUE, StateKind.TRANSACTIONAL], ids=lambda k: k.value)
def setup(request: pytest.FixtureRequest, backend_name: str) -> tuple[Backend, MapSpec]:
    spec = SPECS[request.param]
    return BACKING_MAPS[backend_name](spec, request), spec


def commit(state: Any, txid: int, partials: dict[str, Any]) -> None:
    state.begin_commit(txid)
    keys = sorted(partials)
    state.multi_update(keys, [combine_updater(Upsert(), partials[k]) for k in keys])  # type: ignore[arg-type]
    state.commit(txid)


def seen(state: Any, spec: MapSpec, keys: list[str]) -> list[Any]:
    return [visible_value(spec, v) for v in state.multi_get(keys)]


class TestUpsertContract:
    def test_latest_wins_by_record_place_whatever_the_batch_order(self, setup: tuple[Backend, MapSpec]) -> None:
        """A later batch holding an older record (another partition, earlier timestamp) does not overwrite."""
        backend, spec = setup
        state = MAPS[spec.kind](backend.map)
        commit(state, 1, {"a": record(10, 5, "five", ts=2_000)})
        commit(state, 2, {"a": record(99, 6, "six", ts=1_500, partition=1)})
        assert seen(state, spec, ["a"]) == [(5, "five")]
        commit(state, 3, {"a": record(11, 7, None, ts=2_000)})
        assert seen(state, spec, ["a"]) == [(7, None)]

    def test_tombstone_deletes_and_keeps_its_txid(self, setup: tuple[Backend, MapSpec]) -> None:
        """The deleted key reads as absent; its row is still there, carrying the tombstone's txid."""
        backend, spec = setup
        state = MAPS[spec.kind](backend.map)
        commit(state, 1, {"a": record(1, 5, "x"), "b": record(2, 8, "y")})
        commit(state, 2, {"a": tombstone(3)})
        assert seen(state, spec, ["a", "b"]) == [None, (8, "y")]
        stored = backend.map.multi_get(["a"])[0]
        assert stored is not None
        assert stored.txid == 2
        if backend.reopen is not None:  # durable: a second instance reads the same row
            again = backend.reopen().multi_get(["a"])[0]
            assert again == stored

    def test_replayed_tombstone_txid_is_recognised(self, setup: tuple[Backend, MapSpec]) -> None:
        """Replaying the tombstone's txid changes nothing; a newer record then brings the key back."""
        backend, spec = setup
        state = MAPS[spec.kind](backend.map)
        commit(state, 1, {"a": record(1, 5, "x")})
        commit(state, 2, {"a": tombstone(3)})
        before = backend.map.multi_get(["a"])[0]
        commit(state, 2, {"a": tombstone(3)})  # a replay of txid 2 (the commit mark was lost)
        assert backend.map.multi_get(["a"])[0] == before
        commit(state, 3, {"a": record(2, 9, "older")})  # older than the tombstone: stays deleted
        assert seen(state, spec, ["a"]) == [None]
        commit(state, 4, {"a": record(4, 10, "new")})
        assert seen(state, spec, ["a"]) == [(10, "new")]

    def test_opaque_replay_with_other_records_recomputes_from_prev(self, request: pytest.FixtureRequest,
                                                                    backend_name: str) -> None:
        """Opaque: attempt 2 of a txid that no longer holds the tombstone undoes the delete (built on prev)."""
        spec = SPECS[StateKind.OPAQUE]
        backend = BACKING_MAPS[backend_name](spec, request)
        state = OpaqueMap(backend.map)
        commit(state, 1, {"a": record(1, 5, "x")})
        commit(state, 2, {"a": tombstone(3)})  # attempt 1 of txid 2
        commit(state, 2, {"a": record(2, 6, "y")})  # attempt 2: the tombstone's partition was unreadable
        assert seen(state, spec, ["a"]) == [(6, "y")]
        commit(state, 2, {"a": tombstone(3)})  # attempt 3: readable again, the delete is back
        assert seen(state, spec, ["a"]) == [None]


def test_reader_treats_deleted_keys_as_absent(request: pytest.FixtureRequest, backend_name: str) -> None:
    """``query``'s readers (SQLite, Cassandra) skip a deleted key by key and in the top N."""
    if backend_name == "memory":
        pytest.skip("the memory backend keeps no table for a reader")
    from states.reader import TableReader

    spec = SPECS[StateKind.OPAQUE]
    backend = BACKING_MAPS[backend_name](spec, request)
    state = OpaqueMap(backend.map)
    commit(state, 1, {"a": record(1, 5, "x"), "b": record(2, 8, "y")})
    commit(state, 2, {"a": tombstone(3)})
    reader: TableReader
    if backend_name == "sqlite":
        from states.sqlite.reader import SqliteTableReader

        reader = SqliteTableReader(backend.map.path)
    else:
        from states.cassandra.reader import CassandraTableReader

        reader = CassandraTableReader(backend.map.settings)
    assert reader.get(spec, [("a",), ("b",)]) == [None, {"id": "b", "txid": 1, "amount": 8, "name": "y",
                                                         "deleted": False}]
    assert [r["id"] for r in reader.top(spec, 10, "amount")] == ["b"]
