"""First offsets: per partition the first offset the pipeline ever covered, kept across runs, rewinds and re-plans."""

from __future__ import annotations

from app.coordinator.progress import FIRST_OFFSETS_KEY, FirstOffsets, ProgressLog, StoredBatch
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import SpoutKind
from states.memory import MemoryTransactionalStateStore
from states.spec import StateKind
from tests.app.harness import World


def plan(txid: int, ranges: dict[int, tuple[int, int]]) -> BatchPlan:
    return BatchPlan(txid, {Partition("events", p): PartitionMetadata("events", p, a, b, b - a, "t")
                            for p, (a, b) in ranges.items()})


def test_first_freeze_records_each_partition_once_and_later_plans_never_move_it() -> None:
    store = MemoryTransactionalStateStore("t")
    epoch = store.acquire_lease("me", 30)
    log = ProgressLog(store, epoch=epoch)
    assert log.first_offsets() is None
    log.store_batch(StoredBatch(plan(1, {0: (5, 9)}), 1))
    log.store_batch(StoredBatch(plan(2, {0: (9, 12), 1: (3, 4)}), 1))  # partition 1 appears at txid 2
    log.store_batch(StoredBatch(plan(2, {0: (10, 12), 1: (3, 4)}), 2))  # a re-plan (data loss skipped)
    # another process (a restart, or a rewind to 0) stores later plans: the first offsets stay
    ProgressLog(store, epoch=epoch).store_batch(StoredBatch(plan(3, {0: (0, 0), 1: (0, 0)}), 1))
    assert ProgressLog(store, epoch=epoch).first_offsets() == \
        FirstOffsets(1, {Partition("events", 0): 5, Partition("events", 1): 3})
    assert store.get(FIRST_OFFSETS_KEY) == {"since_txid": 1, "offsets": {"events:0": 5, "events:1": 3}}


def test_a_store_that_ran_before_recording_says_since_which_txid() -> None:
    store = MemoryTransactionalStateStore("t")
    epoch = store.acquire_lease("me", 30)
    ProgressLog(store, epoch=epoch).store_batch(StoredBatch(plan(40, {0: (100, 120)}), 1))
    first = ProgressLog(store, epoch=epoch).first_offsets()
    assert first is not None
    assert first.since_txid == 40


def test_the_coordinator_records_first_offsets_through_its_fenced_store() -> None:
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=2)
    world.append(0, "a")
    world.append(1, "b")
    assert world.coordinator.step() == "committed"
    world.append(0, "c")
    assert world.coordinator.step() == "committed"
    first = ProgressLog(world.store, epoch=-1).first_offsets()
    assert first is not None
    assert first.since_txid == 1
    assert sorted(first.offsets.values()) == [0, 0]
