"""Map states over backing maps: CAS retries, caching, snapshots, aggregators, write skipping."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from states import (
    CachedMap,
    CasCachedMap,
    CasRetriesExhaustedError,
    Count,
    Max,
    Min,
    NonTransactionalMap,
    OpaqueMap,
    SnapshottableMap,
    StaleBatchError,
    Sum,
    TransactionalMap,
    combiner,
)
from states.aggregators import combine_updater
from states.errors import FATAL, CommitProtocolError
from states.factory import StateFactory
from states.memory import MemoryBackingMap
from states.metrics import StateMetrics
from states.protocols import CasBackingMap, CasResult
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue


class RacingMap(MemoryBackingMap):
    """Before each CAS, a 'zombie' writes ``interference`` into the first key, ``times`` times."""

    def __init__(self, interference: Sequence[Any], times: int) -> None:
        super().__init__()
        self.interference, self.times, self.cas_calls, self.gets = list(interference), times, 0, 0

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        self.gets += 1
        return super().multi_get(keys)

    def multi_cas(self, keys: Sequence[Any], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        self.cas_calls += 1
        if self.times > 0:
            self.times -= 1
            self.data[keys[0]] = self.interference.pop(0)
        return super().multi_cas(keys, expected, values)


def opaque_commit(state: Any, txid: int, updates: dict[Any, int]) -> list[Any]:
    state.begin_commit(txid)
    out = state.multi_update(list(updates), [combine_updater(Count(), n) for n in updates.values()])
    state.commit(txid)
    return out


class TestCompareAndSet:
    def test_failed_cas_recomputes_from_returned_value_without_rereading(self) -> None:
        """A zombie of the same txid wrote first: the CAS fails, the map recomputes from the returned row."""
        metrics = StateMetrics(CollectorRegistry())
        backing = RacingMap([OpaqueValue(5, 13, 10)], times=1)  # same txid 5, partial 3 on prev 10
        backing.data[("k",)] = OpaqueValue(4, 10, 6)
        state = OpaqueMap(backing, metrics=metrics)
        assert opaque_commit(state, 5, {("k",): 3}) == [13]
        assert backing.data[("k",)] == OpaqueValue(5, 13, 10)
        assert backing.gets == 1
        assert backing.cas_calls == 1  # recomputed value equals stored: no second write
        assert metrics.value("trident_cas_conflicts_total") == 1

    def test_conflict_with_an_older_writer_retries_and_applies(self) -> None:
        """The stored value changed under us (a retried write of txid 4): retry on the new value."""
        backing = RacingMap([OpaqueValue(4, 11, 6)], times=1)
        backing.data[("k",)] = OpaqueValue(4, 10, 6)
        state = OpaqueMap(backing)
        assert opaque_commit(state, 5, {("k",): 3}) == [14]
        assert backing.data[("k",)] == OpaqueValue(5, 14, 11)
        assert backing.cas_calls == 2

    def test_writer_of_n_finding_n_plus_1_stops(self) -> None:
        """A writer of txid N that finds N+1 stored raises StaleBatchError naming the key, writes nothing."""
        backing = RacingMap([OpaqueValue(6, 20, 17)], times=1)
        backing.data[("k",)] = OpaqueValue(4, 10, 6)
        with pytest.raises(StaleBatchError) as e:
            opaque_commit(OpaqueMap(backing), 5, {("k",): 3})
        assert e.value.key == ("k",)
        assert e.value.stored_txid == 6
        assert backing.data[("k",)] == OpaqueValue(6, 20, 17)

    def test_retries_are_bounded(self) -> None:
        """A key that changes before every CAS exhausts the attempts with a typed error."""
        backing = RacingMap([OpaqueValue(4, 10 + i, 6) for i in range(10)], times=10)
        backing.data[("k",)] = OpaqueValue(4, 9, 6)
        with pytest.raises(CasRetriesExhaustedError) as e:
            opaque_commit(OpaqueMap(backing, max_cas_attempts=3), 5, {("k",): 1})
        assert e.value.keys == [("k",)]
        assert e.value.attempts == 3
        assert backing.cas_calls == 3

    def test_unchanged_values_are_not_written(self) -> None:
        """Replaying an applied transactional batch sends no write at all."""
        backing = RacingMap([], times=0)
        state = TransactionalMap(backing)
        opaque_commit(state, 1, {("a",): 1, ("b",): 2})
        calls = backing.cas_calls
        opaque_commit(state, 1, {("a",): 1, ("b",): 2})
        assert backing.cas_calls == calls
        assert state.multi_get([("a",), ("b",)]) == [1, 2]


def read_modify_put(state: Any, txid: int, key: Any, n: int) -> None:
    """A ``partition_persist``-style updater: read the value with multi_get, write value + n with multi_put."""
    state.begin_commit(txid)
    [old] = state.multi_get([key])
    state.multi_put([key], [(old or 0) + n])
    state.commit(txid)


class TestReadsDuringCommit:
    def test_opaque_replay_reads_prev_so_read_modify_put_is_exactly_once(self) -> None:
        """Replaying txid 1 reads the value before txid 1 (prev), as Trident's OpaqueMap.multiGet does: 5, not 10."""
        state = OpaqueMap(MemoryBackingMap())
        read_modify_put(state, 1, ("a",), 5)
        read_modify_put(state, 1, ("a",), 5)  # the replay of txid 1
        assert state.multi_get([("a",)]) == [5]
        read_modify_put(state, 2, ("a",), 5)
        assert state.multi_get([("a",)]) == [10]

    def test_transactional_replay_reads_val_and_skips_the_put(self) -> None:
        """Transactional: multi_get returns the stored value (as Trident does); the replay's put is skipped."""
        state = TransactionalMap(MemoryBackingMap())
        read_modify_put(state, 1, ("a",), 5)
        read_modify_put(state, 1, ("a",), 5)
        assert state.multi_get([("a",)]) == [5]

    def test_a_key_written_in_this_batch_reads_back_its_new_value(self) -> None:
        """Within one commit, a key this map wrote reads its new value (Trident's cached batch reads)."""
        state = OpaqueMap(MemoryBackingMap())
        read_modify_put(state, 1, ("a",), 5)
        state.begin_commit(1)
        state.multi_put([("a",)], [7])
        assert state.multi_get([("a",), ("b",)]) == [7, None]
        state.commit(1)

    def test_two_updates_of_a_key_in_one_commit_both_count(self) -> None:
        """A second multi_update of a key within one commit builds on the first (and a replay still starts from prev)."""
        for state in (OpaqueMap(MemoryBackingMap()), TransactionalMap(MemoryBackingMap())):
            for txid in (1, 2):
                state.begin_commit(txid)
                state.multi_update([("a",)], [combine_updater(Sum(), 3)])
                state.multi_update([("a",)], [combine_updater(Sum(), 4)])
                state.commit(txid)
            assert state.multi_get([("a",)]) == [14], type(state).__name__
            state.begin_commit(2)  # a replay of txid 2 with the same two updates
            state.multi_update([("a",)], [combine_updater(Sum(), 3)])
            state.multi_update([("a",)], [combine_updater(Sum(), 4)])
            state.commit(2)
            assert state.multi_get([("a",)]) == [14], type(state).__name__

    def test_reading_a_key_ahead_of_the_batch_is_refused(self) -> None:
        """During the commit of txid 1, a key already at txid 2 means the batch is behind: StaleBatchError."""
        state = OpaqueMap(MemoryBackingMap())
        read_modify_put(state, 2, ("a",), 5)
        state.begin_commit(1)
        with pytest.raises(StaleBatchError):
            state.multi_get([("a",)])


class TestKinds:
    def test_non_transactional_counts_a_replay_twice(self) -> None:
        """At-least-once: the same txid applied twice is counted twice."""
        state = NonTransactionalMap(MemoryBackingMap())
        opaque_commit(state, 1, {("a",): 2})
        opaque_commit(state, 1, {("a",): 2})
        assert state.multi_get([("a",)]) == [4]

    def test_opaque_replay_with_different_content_replaces_attempt(self) -> None:
        """Opaque: attempt 2 of txid 1 with a different partial replaces attempt 1's contribution."""
        state = OpaqueMap(MemoryBackingMap())
        opaque_commit(state, 1, {("a",): 2})
        opaque_commit(state, 1, {("a",): 5})
        opaque_commit(state, 2, {("a",): 1})
        assert state.multi_get([("a",)]) == [6]

    def test_multi_update_outside_commit_is_refused(self) -> None:
        """A caller's bug, typed so that no retry hides it (it is one of the state's fatal errors)."""
        assert CommitProtocolError in FATAL
        with pytest.raises(CommitProtocolError, match="outside begin_commit"):
            OpaqueMap(MemoryBackingMap()).multi_update([("a",)], [lambda v: 1])

    def test_snapshottable_global_count(self) -> None:
        """A global aggregate lives under one fixed key and follows the opaque rule."""
        snap = SnapshottableMap(OpaqueMap(MemoryBackingMap()))
        for txid, n in ((1, 5), (1, 6), (2, 4)):
            snap.begin_commit(txid)
            snap.update(combine_updater(Sum(), n))
            snap.commit(txid)
        assert snap.get() == 10


class TestCachedMap:
    def test_warm_cache_skips_reads_and_survives_a_zombie(self) -> None:
        """Warm reads come from the cache; a stale cached value costs one failed CAS, never a wrong count."""
        backing = RacingMap([], times=0)
        state = OpaqueMap(CasCachedMap(backing, size=100))
        opaque_commit(state, 1, {("a",): 1})
        gets = backing.gets
        opaque_commit(state, 2, {("a",): 1})
        assert backing.gets == gets  # warm: no read
        backing.data[("a",)] = OpaqueValue(3, 7, 2)  # someone else committed txid 3 behind the cache's back
        cas_calls = backing.cas_calls
        assert opaque_commit(state, 4, {("a",): 1}) == [8]
        assert backing.data[("a",)] == OpaqueValue(4, 8, 7)
        assert backing.cas_calls == cas_calls + 2
        assert backing.gets == gets  # one refused CAS, one applied, no read

    def test_lru_evicts_oldest(self) -> None:
        cache = CachedMap(MemoryBackingMap(), size=2)
        cache.multi_put([1, 2, 3], ["a", "b", "c"])
        assert list(cache._lru) == [2, 3]
        assert cache.multi_get([1, 2, 3]) == ["a", "b", "c"]

    def test_each_cache_matches_its_backing_map(self) -> None:
        """CachedMap has no compare-and-set; CasCachedMap is a CAS map and refuses a plain map below it."""

        class Plain:
            def multi_get(self, keys: Sequence[Any]) -> list[Any]:
                return [None] * len(keys)

            def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
                pass

        assert not isinstance(CachedMap(Plain()), CasBackingMap)
        assert not isinstance(CachedMap(MemoryBackingMap()), CasBackingMap)
        assert isinstance(CasCachedMap(MemoryBackingMap()), CasBackingMap)
        with pytest.raises(TypeError, match="compare-and-set"):
            CasCachedMap(Plain())  # type: ignore[arg-type]

    def test_factory_builds_the_cache_that_keeps_compare_and_set(self) -> None:
        """The factory's stack over a CAS backing map is OpaqueMap(CasCachedMap(backing)), cache or not."""
        spec = MapSpec("words", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
        state = StateFactory(backend="memory", cache_size=10).make_state(spec)
        assert isinstance(state, OpaqueMap)
        assert isinstance(state.backing, CasCachedMap)
        uncached = StateFactory(backend="memory", cache_size=0).make_state(spec)
        assert isinstance(uncached, OpaqueMap)
        assert isinstance(uncached.backing, CasBackingMap)
        assert not isinstance(uncached.backing, CachedMap)


class TestAggregators:
    @pytest.mark.parametrize(("agg", "values", "expected"), [
        (Count(), ["x", "y", "z"], 3),
        (Sum(), [1, None, 5], 6),
        (Min(), [4, 2, 9], 2),
        (Max(), [4, 2, 9], 9),
        (combiner("sum_sq", lambda v: v * v, lambda a, b: a + b, 0), [1, 2, 3], 14),
    ])
    def test_combine_over_partials_in_any_grouping(self, agg: Any, values: list[Any], expected: Any) -> None:
        """Folding inits in two groups then combining equals folding them all."""
        inits = [agg.init(v) for v in values]
        left, right = agg.zero(), agg.zero()
        for v in inits[:1]:
            left = agg.combine(left, v)
        for v in inits[1:]:
            right = agg.combine(right, v)
        assert agg.combine(left, right) == expected
