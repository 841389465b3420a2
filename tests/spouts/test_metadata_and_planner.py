"""Partition metadata serialisation and the planner's caps, fairness and resume rule."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spouts.errors import DataLossError, PartitionUnavailableError
from spouts.memory import MemoryEmitter, MemorySource, MemorySpout
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.planner import Caps, plan_batch
from spouts.protocols import PlansInBulk, SpoutKind

metas = st.builds(
    lambda topic, p, first, span, gaps, tid: PartitionMetadata(topic, p, first, first + span, span - min(gaps, span),
                                                               "t", tid),
    st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True), st.integers(0, 1000),
    st.integers(0, 2**62), st.integers(0, 10**6), st.integers(0, 10),
    st.none() | st.from_regex(r"[A-Za-z0-9+/]{22}", fullmatch=True),
)


class TestMetadata:
    @given(st.lists(metas, max_size=6, unique_by=lambda m: (m.topic, m.partition)), st.integers(1, 2**40))
    def test_plan_json_round_trips(self, ms: list[PartitionMetadata], txid: int) -> None:
        """A plan survives JSON exactly, whatever its topics, partitions and offsets."""
        plan = BatchPlan(txid, {m.partition_id: m for m in ms})
        assert BatchPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan

    def test_serialisation_is_stable(self) -> None:
        """The stored format is fixed: versioned, partitions named topic:partition, sorted."""
        plan = BatchPlan(7, {Partition("b", 1): PartitionMetadata("b", 1, 5, 9, 4, "topo"),
                             Partition("a", 0): PartitionMetadata("a", 0, 0, 0, 0, "topo")})
        assert json.dumps(plan.to_json(), sort_keys=False) == (
            '{"v": 1, "txid": 7, "partitions": {'
            '"a:0": {"topic": "a", "partition": 0, "first_offset": 0, "next_offset": 0, "record_count": 0, "topology_id": "topo"}, '
            '"b:1": {"topic": "b", "partition": 1, "first_offset": 5, "next_offset": 9, "record_count": 4, "topology_id": "topo"}}}'
        )

    def test_a_range_keeps_its_topic_id_and_the_form_without_one_still_loads(self) -> None:
        """A topic id is stored with its range and kept by the ranges made from it; a range without one is
        stored as the previous version stored every range, and that form loads with no id."""
        m = PartitionMetadata("a", 0, 3, 9, 6, "topo", "W1cfKasMRaCzUV/LyJ2VLw")
        assert m.to_json()["topic_id"] == "W1cfKasMRaCzUV/LyJ2VLw"
        assert PartitionMetadata.from_json(m.to_json()) == m
        assert m.empty_after().topic_id == m.topic_id
        assert BatchPlan(1, {m.partition_id: m}).head(2).partitions[m.partition_id].topic_id == m.topic_id
        previous = {"v": 1, "txid": 4, "partitions": {"a:0": {"topic": "a", "partition": 0, "first_offset": 3,
                                                              "next_offset": 9, "record_count": 6, "topology_id": "topo"}}}
        loaded = BatchPlan.from_json(previous)
        assert loaded.partitions[Partition("a", 0)].topic_id is None
        assert loaded.to_json() == previous

    def test_unknown_format_version_is_refused(self) -> None:
        with pytest.raises(ValueError, match="unknown batch metadata format"):
            BatchPlan.from_json({"v": 2, "txid": 1, "partitions": {}})

    def test_bad_ranges_are_refused(self) -> None:
        with pytest.raises(ValueError):
            PartitionMetadata("t", 0, 5, 4, 0, "x")
        with pytest.raises(ValueError):
            PartitionMetadata("t", 0, 0, 4, 5, "x")

    def test_topic_names_with_colons_in_ids_parse_from_the_right(self) -> None:
        assert Partition.parse("my.topic-1:12") == Partition("my.topic-1", 12)


class BulkEmitter(MemoryEmitter):
    """A memory emitter that plans in bulk, recording when the planner enters and leaves a plan."""

    def __init__(self, source: MemorySource, kind: SpoutKind = SpoutKind.OPAQUE) -> None:
        super().__init__(source, kind, "test")
        self.events: list[tuple[str, list[Partition]]] = []

    @contextmanager
    def planning(self, partitions: Sequence[Partition]) -> Iterator[None]:
        self.events.append(("enter", list(partitions)))
        try:
            yield
        finally:
            self.events.append(("leave", []))

    def plan_partition(self, partition: Partition, last: PartitionMetadata | None,
                       max_records: int) -> PartitionMetadata | None:
        self.events.append(("plan", [partition]))
        return super().plan_partition(partition, last, max_records)


def source_with(counts: list[int]) -> tuple[MemorySource, list[Partition]]:
    parts = [Partition("t", i) for i in range(len(counts))]
    src = MemorySource(parts)
    for p, n in zip(parts, counts, strict=False):
        for i in range(n):
            src.append(p, None, f"{p.partition}-{i}".encode())
    return src, parts


class TestPlanner:
    def test_caps_per_partition_and_per_batch(self) -> None:
        src, parts = source_with([10, 10, 10])
        plan = plan_batch(1, parts, MemorySpout(src).emitter(), None, Caps(per_partition=4, per_batch=9))
        spans = [m.next_offset - m.first_offset for m in plan]
        assert max(spans) <= 4
        assert sum(spans) == 9

    def test_successive_plans_tile_each_log_without_gaps_or_overlap(self) -> None:
        """Each batch starts at the previous batch's next_offset (never +1); together they cover every offset once."""
        src, parts = source_with([7, 0, 13])
        emitter, last, seen = MemorySpout(src).emitter(), None, []
        for txid in range(1, 20):
            last = plan_batch(txid, parts, emitter, last, Caps(per_partition=3, per_batch=5))
            seen += [(m.partition, o) for m in last for o in range(m.first_offset, m.next_offset)]
        assert sorted(seen) == [(0, o) for o in range(7)] + [(2, o) for o in range(13)]

    def test_total_cap_rotates_so_no_partition_starves(self) -> None:
        src, parts = source_with([100, 100, 100])
        emitter, last, read = MemorySpout(src).emitter(), None, {p.partition: 0 for p in parts}
        for txid in range(1, 7):
            last = plan_batch(txid, parts, emitter, last, Caps(per_partition=10, per_batch=10))
            for m in last:
                read[m.partition] += m.next_offset - m.first_offset
        assert min(read.values()) > 0

    def test_unavailable_partition_opaque_empty_transactional_raises(self) -> None:
        src, parts = source_with([3, 3])
        last = plan_batch(1, parts, MemorySpout(src).emitter(), None, Caps(per_partition=1, per_batch=10))
        src.set_available(parts[0], False)
        opaque = plan_batch(2, parts, MemorySpout(src).emitter(), last, Caps())
        stalled = last.partitions[parts[0]]
        assert (stalled.first_offset, stalled.next_offset) == (0, 1)  # caps of 1 read one record
        assert opaque.partitions[parts[0]] == PartitionMetadata(parts[0].topic, parts[0].partition, 1, 1, 0,
                                                                stalled.topology_id)
        assert opaque.partitions[parts[1]].next_offset == 3
        with pytest.raises(PartitionUnavailableError):
            plan_batch(2, parts, MemorySpout(src, SpoutKind.TRANSACTIONAL).emitter(), last, Caps())

    def test_a_bulk_emitter_is_entered_once_per_plan_with_all_its_partitions(self) -> None:
        """An emitter that PlansInBulk is given every partition (in visiting order) before the first is planned,
        and the plan is left after the last, or when planning raises."""
        src, parts = source_with([3, 3, 3])
        em = BulkEmitter(src)
        assert isinstance(em, PlansInBulk)
        assert not isinstance(MemorySpout(src).emitter(), PlansInBulk)
        plan_batch(1, parts, em, None, Caps(per_batch=4))  # the cap is spent before the last partition
        rotated = parts[1:] + parts[:1]
        assert em.events == [("enter", rotated), ("plan", [parts[1]]), ("plan", [parts[2]]), ("leave", [])]
        em = BulkEmitter(src, SpoutKind.TRANSACTIONAL)
        src.set_available(parts[2], False)
        with pytest.raises(PartitionUnavailableError):
            plan_batch(1, parts, em, None, Caps())
        assert em.events == [("enter", rotated), ("plan", [parts[1]]), ("plan", [parts[2]]), ("leave", [])]

    def test_frozen_range_below_log_start_is_data_loss_on_read(self) -> None:
        src, parts = source_with([5])
        plan = plan_batch(1, parts, MemorySpout(src).emitter(), None, Caps())
        src.truncate_before(parts[0], 2)
        with pytest.raises(DataLossError):
            list(MemorySpout(src).emitter().emit_partition(next(iter(plan))))
