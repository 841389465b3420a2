"""CasCachedMap's blind inserts: keys it does not hold are guessed absent while most misses are new keys."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, cast

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.memory import MemoryBackingMap
from states.protocols import CasResult
from states.values import OpaqueValue


class Counting(MemoryBackingMap):
    """A memory backing map that counts the keys read and compare-and-set, and failed compare-and-sets."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = self.cas = self.failed = 0

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        self.reads += len(keys)
        return super().multi_get(keys)

    def multi_cas(self, keys: Sequence[Hashable], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        results = super().multi_cas(keys, expected, values)
        self.cas += len(keys)
        self.failed += sum(not r.applied for r in results)
        return results


def commit(state: OpaqueMap, txid: int, words: Sequence[str]) -> None:
    state.begin_commit(txid)
    state.multi_update([(w,) for w in words], [combine_updater(Count(), 1)] * len(words))
    state.commit(txid)


def counts(backing: MemoryBackingMap) -> dict[Hashable, int]:
    return {k: cast(int, v.curr) for k, v in backing.data.items() if isinstance(v, OpaqueValue)}


def test_a_fresh_cache_reads_a_sample_then_inserts_new_keys_blind() -> None:
    backing = Counting()
    words = [f"w{i}" for i in range(10)]
    commit(OpaqueMap(CasCachedMap(backing, sample=3)), 1, words)
    assert (backing.reads, backing.cas, backing.failed) == (3, 10, 0)  # 3 sampled, all absent: 7 blind inserts
    assert counts(backing) == {(w,): 1 for w in words}


def test_a_seeded_cache_inserts_new_keys_blind_at_once() -> None:
    backing = Counting()
    commit(OpaqueMap(CasCachedMap(backing, entries=[(("old",), None)])), 1, ["a", "b", "c"])
    assert (backing.reads, backing.cas, backing.failed) == (0, 3, 0)


def test_a_fresh_cache_over_existing_rows_reads_its_misses_and_stays_exact() -> None:
    """After a restart the sample shows existing rows: no guesses, read + LWT per key as without them."""
    backing = Counting()
    words = [f"w{i}" for i in range(20)]
    commit(OpaqueMap(CasCachedMap(backing)), 1, words)
    backing.reads = backing.cas = backing.failed = 0
    commit(OpaqueMap(CasCachedMap(backing, sample=3)), 2, words)
    assert (backing.reads, backing.cas, backing.failed) == (20, 20, 0)
    assert counts(backing) == {(w,): 2 for w in words}


def test_wrong_guesses_cost_one_failed_lwt_each_then_misses_are_read() -> None:
    """A seeded cache over rows it does not hold: the guesses fail (carrying the row), then it reads."""
    backing = Counting()
    words = [f"w{i}" for i in range(20)]
    commit(OpaqueMap(CasCachedMap(backing)), 1, words)
    cache = CasCachedMap(backing, entries=[(("w0",), backing.data[("w0",)])])
    state = OpaqueMap(cache)
    backing.reads = backing.cas = backing.failed = 0
    commit(state, 2, words[:10])
    assert (backing.reads, backing.cas, backing.failed) == (0, 19, 9)  # 9 wrong guesses, 10 writes
    assert cache.absent_rate is not None
    assert cache.absent_rate <= 0.5
    backing.reads = backing.cas = backing.failed = 0
    commit(state, 3, words[10:])
    assert (backing.reads, backing.cas, backing.failed) == (10, 10, 0)
    assert counts(backing) == {(w,): 2 for w in words}


def test_guessing_resumes_when_the_misses_read_are_new_keys() -> None:
    backing = Counting()
    cache = CasCachedMap(backing)
    cache.absent_rate = 0.25  # as after a fresh start over existing rows
    state = OpaqueMap(cache)
    commit(state, 1, ["a", "b"])  # read: both absent
    commit(state, 2, ["c", "d"])  # guessed: the read found only new keys (0.25 -> 0.625)
    backing.reads = backing.cas = 0
    commit(state, 3, ["e", "f"])
    assert (backing.reads, backing.cas) == (0, 2)


def test_without_blind_inserts_misses_are_read() -> None:
    backing = Counting()
    commit(OpaqueMap(CasCachedMap(backing, blind_inserts=False)), 1, ["a", "b"])
    assert (backing.reads, backing.cas) == (2, 2)


def test_a_replay_of_a_committed_txid_through_a_warm_cache_sends_nothing() -> None:
    backing = Counting()
    state = OpaqueMap(CasCachedMap(backing))
    commit(state, 1, ["a", "b"])
    backing.reads = backing.cas = 0
    commit(state, 1, ["a", "b"])
    assert (backing.reads, backing.cas) == (0, 0)
    assert counts(backing) == {("a",): 1, ("b",): 1}
