"""A commit partition's cache file is used only when saved by the partition's last commit (or this txid)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from app.spark.tasks import PartitionCaches
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PartitionCaches:
    from pyspark import SparkFiles

    monkeypatch.setattr(SparkFiles, "getRootDirectory", classmethod(lambda cls: str(tmp_path)))
    spec = MapSpec("words", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
    return PartitionCaches(StateFactory(backend="memory"), spec, 4, [1])


def test_a_file_saved_by_the_last_commit_or_this_txid_is_used(caches: PartitionCaches) -> None:
    caches.save(7, [("a", 1), ("b", 2)], {})
    assert caches.load({7, 8}) == [("a", 1), ("b", 2)]  # saved by the previous commit
    assert caches.load({6, 7}) == [("a", 1), ("b", 2)]  # an earlier attempt of this txid


def test_an_older_file_is_cold(caches: PartitionCaches) -> None:
    """Saved at txid 5, but the partition was committed at 7 elsewhere: its entries are stale."""
    caches.save(5, [("a", 1)], {})
    assert caches.load({7, 8}) == []


def test_a_file_without_its_txid_is_cold(caches: PartitionCaches) -> None:
    path = next(iter(caches.paths.values()))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps([("a", 1)]))
    assert caches.load({7, 8}) == []
