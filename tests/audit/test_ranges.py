"""Which ranges an audit can recount: a partition whose topic id changed between two txids moved onto a new log,
even where the new log's offsets happen to continue the old one's."""

from __future__ import annotations

import pytest

from app.audit.ranges import AuditRefusedError, choose
from app.coordinator.progress import ProgressLog, StoredBatch
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from states.memory.txstate import MemoryTransactionalStateStore

P = Partition("words", 0)


def _log(*ranges: tuple[int, int, str | None]) -> tuple[MemoryTransactionalStateStore, ProgressLog]:
    """A progress log whose txids 1.. committed ``(first, next, topic id)`` of partition ``P``."""
    store = MemoryTransactionalStateStore()
    log = ProgressLog(store, epoch=store.acquire_lease("test", 60), retention=16)
    for txid, (first, end, topic_id) in enumerate(ranges, start=1):
        meta = PartitionMetadata(P.topic, P.partition, first, end, end - first, "wc", topic_id)
        log.store_batch(StoredBatch(BatchPlan(txid, {P: meta}), 1))
        log.mark_committed(txid, at=float(txid))
    return store, log


def test_a_topic_id_that_changed_where_the_offsets_line_up_is_a_move_onto_a_new_log() -> None:
    store, log = _log((0, 0, "old-id"), (0, 5, "new-id"), (5, 9, "new-id"))
    with pytest.raises(AuditRefusedError, match="moved onto a new log at txid 2"):
        choose(store, log, at=None, since=None, topology_id="wc")
    ranges = choose(store, log, at=None, since=1, topology_id="wc")  # the new log from its start
    assert ranges.plan.partitions[P].first_offset == 0
    assert ranges.plan.partitions[P].next_offset == 9


def test_ranges_of_one_log_and_ranges_without_ids_are_no_move() -> None:
    for ids in (("a", "a", "a"), (None, "a", "a"), (None, None, None)):
        store, log = _log((0, 0, ids[0]), (0, 5, ids[1]), (5, 9, ids[2]))
        full = choose(store, log, at=None, since=None, topology_id="wc").plan.partitions[P]
        assert (full.first_offset, full.next_offset) == (0, 9)
