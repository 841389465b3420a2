"""The coordinator's stored documents: their JSON, old documents, and the read-only progress view."""

from __future__ import annotations

from app.coordinator.progress import (
    BATCHES_NAMESPACE,
    COMMITTED_KEY,
    CommittedMarker,
    ProgressLog,
    StoredBatch,
    read_progress,
)
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import SpoutKind
from states.memory import MemoryTransactionalStateStore
from states.spec import StateKind
from tests.app.harness import World


def plan(txid: int, first: int, nxt: int) -> BatchPlan:
    meta = PartitionMetadata("events", 0, first, nxt, nxt - first, "t")
    return BatchPlan(txid, {Partition("events", 0): meta})


def test_documents_keep_their_json_shape() -> None:
    """The marker and a batch document are the JSON the module docstring promises."""
    assert CommittedMarker(7, 12.5).to_json() == {"committed_txid": 7, "committed_at": 12.5}
    doc = StoredBatch(plan(8, 3, 5), 2).to_json()
    assert doc == {"attempt": 2, "plan": plan(8, 3, 5).to_json()}
    assert StoredBatch.from_json(doc) == StoredBatch(plan(8, 3, 5), 2)


def test_old_documents_read_as_attempt_one_and_unknown_time() -> None:
    """A bare plan (stored before attempts were kept) is attempt 1; an old marker has no time."""
    assert StoredBatch.from_json(plan(4, 0, 2).to_json()) == StoredBatch(plan(4, 0, 2), 1)
    assert CommittedMarker.from_json({"committed_txid": 3}) == CommittedMarker(3, None)
    assert CommittedMarker.from_json(None) == CommittedMarker(0, None)


def test_progress_view_of_a_frozen_uncommitted_txid() -> None:
    """The view shows the committed txid, its time and plan, and the frozen txid after it with its attempt."""
    store = MemoryTransactionalStateStore("t")
    epoch = store.acquire_lease("me", 30)
    log = ProgressLog(store, epoch=epoch)
    log.store_batch(StoredBatch(plan(1, 0, 2), 1))
    log.mark_committed(1, at=1000.0)
    store.put(f"{BATCHES_NAMESPACE}/{2:020d}", plan(2, 2, 4).to_json(), epoch=epoch)  # an old, bare document
    assert read_progress(store).frozen == StoredBatch(plan(2, 2, 4), 1)
    ProgressLog(store, epoch=epoch).store_batch(StoredBatch(plan(2, 2, 4), 2))
    p = read_progress(store)
    assert (p.topology_id, p.committed_txid, p.committed.committed_at) == ("t", 1, 1000.0)
    assert p.committed_plan == plan(1, 0, 2)
    assert p.frozen == StoredBatch(plan(2, 2, 4), 2)
    assert p.frozen_txids == (2,)
    assert store.get(COMMITTED_KEY) == {"committed_txid": 1, "committed_at": 1000.0}


def test_coordinator_marks_commits_with_the_wall_clock() -> None:
    """A fresh store has no progress; after a commit the marker holds the coordinator's wall-clock time."""
    world = World(SpoutKind.OPAQUE, StateKind.OPAQUE, partitions=1)
    assert read_progress(world.store).committed_txid == 0
    assert read_progress(world.store).frozen is None
    world.coordinator._wall_clock = lambda: 1234.5
    world.append(0, "a")
    assert world.coordinator.step() == "committed"
    p = read_progress(world.store)
    assert (p.committed_txid, p.committed.committed_at, p.frozen) == (1, 1234.5, None)
    assert p.committed_plan is not None
    assert p.committed_plan.record_count == 1
