"""Property: latest-value upserts with deleting tombstones through the coordinator and the LocalExecutor,
under the random failures, restarts, unavailable partitions and opaque replays of the batch-protocol
property test: every key's stored value is its newest record's (absent when that is a tombstone)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from app.coordinator.coordinator import Coordinator
from app.spark.plan import TupleAggregator
from app.topology.local import LocalExecutor, Sink
from spouts.memory import MemorySpout
from spouts.metadata import Partition
from spouts.protocols import Record, SpoutKind
from states.aggregators import Latest
from states.spec import StateKind
from states.stamped import Stamped
from tests.app.harness import MAPS, TOPIC, World
from tests.app.test_batch_protocol_properties import EXACT, PARTITIONS, drain, play, scenario

UPSERT = TupleAggregator((Latest(), Latest()))  # (latest(value), latest(deleted))


def stamped(record: Record) -> tuple[Stamped, Stamped]:
    """The LocalExecutor's way in: the record's value and tombstone flag, stamped with its place."""
    return Stamped.of_record(record, record.value), Stamped.of_record(record, record.value is None)


class UpsertWorld(World):
    """The harness world, its records keyed (every fifth one a tombstone) and materialised by ``latest``."""

    appended = 0

    def new_coordinator(self) -> Coordinator:
        spout = MemorySpout(self.source, self.spout_kind, topology_id="world")
        state = MAPS[self.state_kind](self.backing, metrics=self.metrics.states.bound("world"))
        sink = Sink(state, UPSERT, key=lambda r: (r.key.decode(),), value=stamped)
        self.executor = LocalExecutor(spout.emitter(), [sink])
        coord = self.coordinator_class("world", spout, self.executor, self.store, self._config(), metrics=self.metrics,
                                       faults=self.faults)
        coord.start()
        return coord

    def _config(self) -> Any:
        from app.coordinator.coordinator import CoordinatorConfig

        return CoordinatorConfig(caps=self.caps, max_pending=self.max_pending, owner="world-owner",
                                 retry_backoff_s=(0.0, 0.0), idle_sleep_s=0.0)

    def append(self, partition: int, key: str) -> None:
        self.appended += 1
        value = None if self.appended % 5 == 0 else f"v{self.appended}".encode()
        self.source.append(Partition(TOPIC, partition), key.encode(), value)

    def stored(self) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for k, v in self.backing.data.items():
            assert isinstance(k, tuple)
            value, deleted = v.curr if self.state_kind is StateKind.OPAQUE else v.val
            if not deleted.value:
                out[k[0]] = value.value
        return out

    def newest(self) -> dict[str, bytes]:
        """Ground truth straight from the source: per key, the record with the highest place."""
        last: dict[str, Record] = {}
        for r in self.source.all_records():
            k = (r.key or b"").decode()
            if k not in last or (r.timestamp, r.partition, r.offset) > (last[k].timestamp, last[k].partition,
                                                                         last[k].offset):
                last[k] = r
        return {k: r.value for k, r in last.items() if r.value is not None}


@pytest.mark.parametrize(("spout_kind", "state_kind"), EXACT, ids=lambda k: k.value)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=scenario)
def test_latest_with_tombstones_under_random_failures(spout_kind: SpoutKind, state_kind: StateKind,
                                                      s: dict[str, Any]) -> None:
    """Every key's stored value equals its newest record's, deleted keys absent, after any failures."""
    world = UpsertWorld(spout_kind, state_kind, partitions=PARTITIONS, max_pending=s["max_pending"])
    for p, keys in enumerate(s["initial"]):
        for k in keys:
            world.append(p, k)
    play(world, s["actions"])
    drain(world)
    assert world.stored() == world.newest()
