"""Comparing a recount with a stored SQLite table as of a txid (app.audit.compare), without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.audit.compare import Outcome, SinkAudit, compare, sampled, snapshot
from states.aggregators import Count, Sum
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue

COUNTS = MapSpec("counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
SUMS = MapSpec("sums", StateKind.OPAQUE, (Column("word", "text"),), (Column("total", "double"),))


def _audit(spec: MapSpec, aggregator: Any, backing: Any, factory: StateFactory, partials: dict[Any, Any], *,
           at: int, since: int = 0, keep: Any = None) -> SinkAudit:
    snap = snapshot(spec, backing, factory, at=at, since=since, keep=keep)
    return compare(snap, aggregator, backing, partials, keep=keep)


def _stored(tmp_path: Path, spec: MapSpec, rows: dict[str, OpaqueValue[Any]]) -> tuple[Any, StateFactory]:
    factory = StateFactory(StateKind.OPAQUE, "sqlite", sqlite_path=str(tmp_path / "s.db"), cache_size=0)
    backing = factory.backing_map(spec)
    if rows:
        backing.multi_put([(k,) for k in rows], list(rows.values()))
    return backing, factory


def test_equal_differing_missing_extra_and_moved_on_keys(tmp_path: Path) -> None:
    backing, factory = _stored(tmp_path, COUNTS, {
        "same": OpaqueValue(3, 4, 1), "more": OpaqueValue(2, 9, 5), "ghost": OpaqueValue(1, 1, None),
        "later": OpaqueValue(4, 7, 2),  # written by txid 4 = T + 1: as of 3 it held 2
        "moving": OpaqueValue(6, 9, 8)})  # written by txids after 4: unknown as of 3
    partials = {("same",): 4, ("more",): 5, ("gone",): 2, ("later",): 2, ("moving",): 1}
    audit = _audit(COUNTS, Count(), backing, factory, partials, at=3)
    found = {k.key[0]: (k.outcome, k.expected, k.stored, k.stored_txid) for k in audit.keys}
    assert found == {"more": (Outcome.DIFFERS, 5, 9, 2), "gone": (Outcome.MISSING, 2, None, None),
                     "ghost": (Outcome.EXTRA, None, 1, 1), "moving": (Outcome.SKIPPED, 1, None, 6)}
    assert audit.checked == 6
    assert audit.counts[Outcome.EQUAL] == 2
    assert audit.differences == 3


def test_a_sample_selects_the_same_keys_from_the_recount_and_the_table(tmp_path: Path) -> None:
    words = [f"k{i}" for i in range(300)]
    backing, factory = _stored(tmp_path, COUNTS, {w: OpaqueValue(1, 1, None) for w in words})
    keep = sampled(0.3)
    audit = _audit(COUNTS, Count(), backing, factory, {(w,): 1 for w in words}, at=1, keep=keep)
    assert 40 < audit.checked < 150
    assert audit.counts[Outcome.EQUAL] == audit.checked
    assert not audit.keys
    again = _audit(COUNTS, Count(), backing, factory, {(w,): 1 for w in words}, at=1, keep=keep)
    assert again.checked == audit.checked


def test_doubles_equal_within_rounding_and_since_builds_on_the_value_then(tmp_path: Path) -> None:
    backing, factory = _stored(tmp_path, SUMS, {"x": OpaqueValue(5, 0.1 + 0.2 + 0.3, 0.1 + 0.2)})
    assert not _audit(SUMS, Sum(), backing, factory, {("x",): 0.6}, at=5).keys
    # --since 4: as of 4 the key held 0.1 + 0.2 (prev); txid 5 read 0.3 more
    assert not _audit(SUMS, Sum(), backing, factory, {("x",): 0.3}, at=5, since=4).keys
    [wrong] = _audit(SUMS, Sum(), backing, factory, {("x",): 0.5}, at=5, since=4).keys
    assert wrong.outcome is Outcome.DIFFERS
    assert wrong.stored_txid == 5


def test_a_key_stored_in_two_shards_is_reported_as_duplicate(request: pytest.FixtureRequest) -> None:
    """A sharded Cassandra table holding one key in two shards (the row copied into another shard, as a
    shard-count or shard-function bug would leave it) reports that key, not one of its rows picked by chance."""
    from cassandra.query import SimpleStatement

    from states.cassandra import CassandraBackingMap
    from states.cassandra.session import shared_client
    from states.cassandra.shards import shard_of
    from tests.states.backends import behaviour_kind, cassandra_settings

    settings = cassandra_settings(request, behaviour_kind(request), shards=4)
    factory = StateFactory(StateKind.OPAQUE, "cassandra", cassandra=settings, cache_size=0)
    backing = CassandraBackingMap(settings, COUNTS, create=True)
    backing.multi_put([("a",), ("b",)], [OpaqueValue(1, 2, None), OpaqueValue(1, 3, None)])
    session = shared_client(settings).session
    home = shard_of(("b",), 4)
    [row] = session.execute(f"SELECT * FROM {settings.keyspace}.counts WHERE shard = {home} AND word = 'b'")
    doc = dict(row) | {"shard": (home + 1) % 4}
    session.execute(SimpleStatement(f"INSERT INTO {settings.keyspace}.counts ({', '.join(doc)}) "
                                    f"VALUES ({', '.join(['%s'] * len(doc))})"), tuple(doc.values()))
    audit = _audit(COUNTS, Count(), backing, factory, {("a",): 2, ("b",): 3}, at=1)
    assert [(k.key, k.outcome) for k in audit.keys] == [(("b",), Outcome.DUPLICATE)]
    assert "stored in 2 rows" in audit.keys[0].reason
    assert (audit.checked, audit.counts[Outcome.EQUAL], audit.differences) == (2, 1, 1)
