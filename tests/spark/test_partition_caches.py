"""A commit partition's cache file is used only when saved by the partition's last commit (or this txid), and
hands on the cache's evidence about misses: a chain of files that began cold keeps reading its misses."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from app.spark.tasks import PartitionCaches, Seed
from states import CasCachedMap, OpaqueMap
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind
from tests.states.test_cas_guesses import Counting, commit, counts

WORDS = MapSpec("words", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from pyspark import SparkFiles

    monkeypatch.setattr(SparkFiles, "getRootDirectory", classmethod(lambda cls: str(tmp_path)))
    return tmp_path


@pytest.fixture
def caches(root: Path) -> PartitionCaches:
    return PartitionCaches(StateFactory(backend="memory"), WORDS, 4, [1])


def test_a_file_saved_by_the_last_commit_or_this_txid_is_used(caches: PartitionCaches) -> None:
    caches.save(7, [("a", 1), ("b", 2)], {}, 1.0)
    assert caches.load({7, 8}) == Seed([("a", 1), ("b", 2)], 1.0)  # saved by the previous commit
    assert caches.load({6, 7}) == Seed([("a", 1), ("b", 2)], 1.0)  # an earlier attempt of this txid


def test_an_older_file_is_cold(caches: PartitionCaches) -> None:
    """Saved at txid 5, but the partition was committed at 7 elsewhere: its entries are stale."""
    caches.save(5, [("a", 1)], {}, 1.0)
    assert caches.load({7, 8}) == Seed([], None)


def test_a_file_without_its_txid_is_cold(caches: PartitionCaches) -> None:
    path = next(iter(caches.paths.values()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps([("a", 1)]))
    assert caches.load({7, 8}) == Seed([], None)


def test_the_estimate_of_absent_misses_is_handed_on(caches: PartitionCaches) -> None:
    caches.save(7, [("a", 1)], {}, 0.125)
    assert caches.load({7, 8}).absent_rate == 0.125
    caches.save(8, [("a", 1)], {}, None)
    assert caches.load({8, 9}).absent_rate is None


def test_one_cold_file_of_several_leaves_no_evidence(root: Path) -> None:
    """A task over two partitions, one of whose files is cold: its misses may be that partition's stored keys."""
    factory = StateFactory(backend="memory")
    PartitionCaches(factory, WORDS, 4, [1]).save(7, [("a", 1)], {}, 1.0)
    PartitionCaches(factory, WORDS, 4, [2]).save(5, [("b", 1)], {}, 1.0)
    assert PartitionCaches(factory, WORDS, 4, [1, 2]).load({7, 8}) == Seed([("a", 1)], None)
    PartitionCaches(factory, WORDS, 4, [2]).save(7, [("b", 1)], {}, 0.5)
    assert PartitionCaches(factory, WORDS, 4, [1, 2]).load({7, 8}) == Seed([("a", 1), ("b", 1)], 0.5)


@pytest.mark.parametrize("hand_on", [True, False], ids=["estimate handed on", "seeded files trusted whole"])
def test_a_partition_that_moved_mid_key_set_fails_no_lwt_on_the_keys_it_never_saw(root: Path, hand_on: bool) -> None:
    """The key set split across two txids, the partition moved between executors (its file here is cold): the
    first txid reads its keys and finds them stored, so the next one, seeded from that file, reads the other
    half too instead of guessing them new. Trusting a seeded file whole (the estimate not handed on: 1.0, as a
    file that has seen every key) costs one failed LWT per key it never saw."""
    backing = Counting()
    words = [f"w{i}" for i in range(40)]
    commit(OpaqueMap(CasCachedMap(backing)), 1, words)  # another executor committed every key at txid 1
    backing.reads = backing.cas = backing.failed = 0

    files = PartitionCaches(StateFactory(backend="memory"), WORDS, 4, [1])
    for txid, keys in ((2, words[:20]), (3, words[20:])):
        seed = files.load({txid - 1, txid})
        cache = CasCachedMap(backing, 100, seed.entries, sample=4,
                             absent_rate=seed.absent_rate if hand_on else 1.0)
        commit(OpaqueMap(cache), txid, keys)
        files.save(txid, cache.entries(), {}, cache.absent_rate)
    assert counts(backing) == {(w,): 2 for w in words}
    assert (backing.reads, backing.cas, backing.failed) == ((40, 40, 0) if hand_on else (20, 60, 20))


def _seeded_by_a_commit_task(root: Path, monkeypatch: pytest.MonkeyPatch, txid: int, previous: int | None) -> Seed:
    """What a commit task of ``txid`` (told the sink's ``previous`` commit) seeds its cache with, from a partition
    file saved after txid 4: its own code path (CommitAggregates), no Spark task around it."""
    from typing import Any

    import pyarrow as pa

    from app.spark.tasks import CommitAggregates
    from states import Count

    factory = StateFactory(backend="memory", pipeline=f"p-{txid}-{previous}")  # a memory table of its own
    files = PartitionCaches(factory, WORDS, 4, [1])
    files.save(4, [(("a",), None)], {}, 0.5)
    monkeypatch.setattr(PartitionCaches, "of", classmethod(lambda cls, *args: files))
    seeds: list[Seed] = []
    make = StateFactory.make_cached_state

    def recording(self: StateFactory, spec: MapSpec, entries: Any = (), size: int = 0,
                  absent_rate: float | None = 1.0, **kw: Any) -> Any:
        seeds.append(Seed(list(entries), absent_rate))
        return make(self, spec, entries, size, absent_rate, **kw)

    monkeypatch.setattr(StateFactory, "make_cached_state", recording)
    task = CommitAggregates(factory, WORDS, Count(), txid, 1, partitions=4, previous=previous)
    rows = list(task(iter([pa.record_batch({"word": ["b"], "count": pa.array([1], pa.int64())})])))
    assert rows[0].column("fatal").to_pylist() == [None]
    return seeds[0]


@pytest.mark.parametrize(("txid", "previous", "warm"), [
    (5, None, True),  # saved by txid - 1, the previous commit assumed
    (7, 4, True),  # the driver says the sink's previous commit was txid 4 (txids 5 and 6 wrote nothing here)
    (7, None, False),  # txid 6 assumed: a file of txid 4 is older than the partition's last commit
    (5, 3, False),  # the driver's previous commit was 3: the file of 4 is another driver's (a takeover)
])
def test_a_commit_task_trusts_a_file_only_from_the_sink_s_previous_commit(
        root: Path, monkeypatch: pytest.MonkeyPatch, txid: int, previous: int | None, warm: bool) -> None:
    """A commit task seeds its cache from a partition's file only when the file was saved by the commit the
    driver names as the sink's previous one (``txid - 1`` when it names none), or by this txid; else cold."""
    seed = _seeded_by_a_commit_task(root, monkeypatch, txid, previous)
    assert seed == (Seed([(("a",), None)], 0.5) if warm else Seed([], None))
