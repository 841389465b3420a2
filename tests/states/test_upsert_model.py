"""latest/first against a simple model, with replays, through the opaque and transactional map states.

The model: per key, the record with the highest (latest) or lowest (first) ``(timestamp,
partition, offset)`` among the records of every committed batch; with tombstones, a key whose
latest record is a tombstone is deleted, which is neither absent (never written) nor a null value
(records whose value is null without being tombstones). The system under test: partials combined in a random
order per batch, committed txid by txid, with replays of a txid: earlier attempts that died
part-way, having written only some keys (a txid's ranges are frozen before its first write, so
every attempt that writes carries the same records). After every txid the state must equal the
model of the batches committed so far.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from states.aggregators import First, Latest, combine_updater
from states.memory import MemoryBackingMap
from states.opaque import OpaqueMap
from states.reader import visible_value
from states.spec import DELETED_COLUMN, Column, MapSpec, StateKind
from states.sqlite import SqliteBackingMap
from states.stamped import Stamped, unstamped
from states.transactional import TransactionalMap

KEYS = ("a", "b", "c")
Rec = tuple[str, int, int, int, int | None, bool]  # key, timestamp, partition, offset, value, tombstone


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[list[Rec]], list[list[set[str]]], int]:
    """Batches of records with unique places, and per batch the earlier attempts (the keys each wrote)."""
    n = draw(st.integers(1, 30))
    places = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 50)), min_size=n, max_size=n, unique=True))
    records: list[Rec] = []
    for p, o in places:  # a tombstone's value is null; other records' values may be null too
        tombstone = draw(st.booleans())
        value = None if tombstone else draw(st.one_of(st.none(), st.integers(-100, 100)))
        records.append((draw(st.sampled_from(KEYS)), draw(st.integers(0, 5)), p, o, value, tombstone))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
    bounds = [0, *cuts, n]
    batches = [records[i:j] for i, j in itertools.pairwise(bounds)]
    attempts = [draw(st.lists(st.sets(st.sampled_from(KEYS)), max_size=2)) for _ in batches]
    return batches, attempts, draw(st.integers(0, 2**16))


class Pair:
    """``(latest(value), latest(deleted))``: the stored tuple of a sink whose tombstones delete."""

    def combine(self, a: Any, b: Any) -> Any:
        return (Latest().combine(a[0], b[0]), Latest().combine(a[1], b[1]))


def _partials(batch: list[Rec], aggregator: Any, seed: int, tombstones: bool) -> dict[str, Any]:
    rows = list(batch)
    random.Random(seed).shuffle(rows)  # combine is commutative and associative: any order, any grouping
    out: dict[str, Any] = {}
    for key, ts, p, o, v, tombstone in rows:
        if tombstones:
            part: Any = (Stamped(ts, p, o, v), Stamped(ts, p, o, tombstone))
        elif tombstone:
            continue  # tombstones: ignore
        else:
            part = Stamped(ts, p, o, v)
        out[key] = part if key not in out else aggregator.combine(out[key], part)
    return out


def _run(state: Any, spec: MapSpec, batches: list[list[Rec]], attempts: list[list[set[str]]], seed: int,
         aggregator: Any, tombstones: bool, pick: Any) -> None:
    for txid, (batch, earlier) in enumerate(zip(batches, attempts, strict=True), start=1):
        for n, wrote in enumerate([*earlier, set(KEYS)]):  # the last attempt is the one that commits
            partials = _partials(batch, aggregator, seed + txid + n, tombstones)  # another grouping each time
            state.begin_commit(txid)
            keys = sorted(k for k in partials if k in wrote)
            state.multi_update(keys, [combine_updater(aggregator, partials[k]) for k in keys])
            state.commit(txid)
        got = [_observed(spec, v) for v in state.multi_get(list(KEYS))]
        assert got == _model(batches[:txid], pick, tombstones), f"after txid {txid}"


ABSENT, DELETED = "absent", "deleted"  # a key never written; a key whose latest record is a tombstone


def _observed(spec: MapSpec, stored: Any) -> Any:
    """What the state holds for a key: ABSENT, DELETED (flagged, and hidden from readers) or its value."""
    if stored is None:
        return ABSENT
    if spec.tombstones and unstamped(stored[-1]):
        assert visible_value(spec, stored) is None, "a deleted key must be hidden from readers"
        return DELETED
    return visible_value(spec, stored)


def _model(batches: list[list[Rec]], pick: Any, tombstones: bool) -> list[Any]:
    records = [r for b in batches for r in b if tombstones or not r[5]]
    out: list[Any] = []
    for key in KEYS:
        mine = [r for r in records if r[0] == key]
        if not mine:
            out.append(ABSENT)
            continue
        chosen = pick(mine, key=lambda r: (r[1], r[2], r[3]))
        out.append(DELETED if chosen[5] else chosen[4])  # a null value that is no tombstone stays a value
    return out


def _spec(kind: StateKind, tombstones: bool) -> MapSpec:
    values: tuple[Column, ...] = (Column("v", "bigint", stamped=True),)
    if tombstones:
        values = (*values, Column(DELETED_COLUMN, "boolean", stamped=True))
    return MapSpec("model", kind, (Column("k", "text"),), values, tombstones=tombstones)


MAPS = {StateKind.OPAQUE: OpaqueMap, StateKind.TRANSACTIONAL: TransactionalMap}


@settings(max_examples=150, deadline=None)
@given(streams(), st.sampled_from([StateKind.OPAQUE, StateKind.TRANSACTIONAL]))
def test_latest_with_tombstones_equals_the_model(stream: Any, kind: StateKind) -> None:
    """Latest value per key with deleting tombstones, under replays, equals the model's last record."""
    batches, attempts, seed = stream
    spec = _spec(kind, True)
    _run(MAPS[kind](MemoryBackingMap()), spec, batches, attempts, seed, Pair(), True, max)


@settings(max_examples=100, deadline=None)
@given(streams(), st.sampled_from([StateKind.OPAQUE, StateKind.TRANSACTIONAL]), st.sampled_from([Latest, First]))
def test_latest_and_first_equal_the_model(stream: Any, kind: StateKind, agg: Any) -> None:
    """latest/first per key (tombstones ignored), under replays, equal the model's last/first record."""
    batches, attempts, seed = stream
    _run(MAPS[kind](MemoryBackingMap()), _spec(kind, False), batches, attempts, seed, agg(), False,
         max if agg is Latest else min)


@settings(max_examples=25, deadline=None)
@given(streams())
def test_latest_with_tombstones_through_sqlite_rows(tmp_path_factory: Any, stream: Any) -> None:
    """The same through SQLite's typed columns: the stored place survives the round trip to a row."""
    batches, attempts, seed = stream
    spec = _spec(StateKind.OPAQUE, True)
    backing = SqliteBackingMap(tmp_path_factory.mktemp("model") / "s.db", spec)
    try:
        _run(OpaqueMap(backing), spec, batches, attempts, seed, Pair(), True, max)
    finally:
        backing.close()
