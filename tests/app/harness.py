"""A small world for driving the coordinator under failures: source, stores, faults, restarts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.metrics import Metrics
from app.topology.local import LocalExecutor, Sink
from spouts.memory import MemorySource, MemorySpout
from spouts.metadata import Partition
from spouts.planner import Caps
from spouts.protocols import SpoutKind
from states import Count, NonTransactionalMap, OpaqueMap, TransactionalMap
from states.memory import MemoryBackingMap, MemoryTransactionalStateStore
from states.protocols import CasResult
from states.spec import StateKind

TOPIC = "events"
MAPS = {StateKind.OPAQUE: OpaqueMap, StateKind.TRANSACTIONAL: TransactionalMap,
        StateKind.NON_TRANSACTIONAL: NonTransactionalMap}


class InjectedFault(Exception):
    """A failure the test injected."""


class FlakyBackingMap(MemoryBackingMap):
    """Writes key by key; when armed, fails after ``fail_after`` more single-key writes."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_after: int | None = None

    def _tick(self) -> None:
        if self.fail_after is not None:
            if self.fail_after == 0:
                self.fail_after = None
                raise InjectedFault("key write")
            self.fail_after -= 1

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        for k, v in zip(keys, values, strict=True):
            self._tick()
            super().multi_put([k], [v])

    def multi_cas(self, keys: Sequence[Any], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        out = []
        for k, e, v in zip(keys, expected, values, strict=True):
            self._tick()
            out.extend(super().multi_cas([k], [e], [v]))
        return out


@dataclass
class Faults:
    """Points armed to fail once each: 'plan', 'process', 'freeze', 'commit', 'mark'."""

    armed: set[str] = field(default_factory=set)
    fired: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self, point: str, txid: int) -> None:
        if point in self.armed:
            self.armed.discard(point)
            self.fired.append((point, txid))
            raise InjectedFault(f"{point} of txid {txid}")


@dataclass
class World:
    """Everything that survives a coordinator crash: the source, the state storage, the store."""

    spout_kind: SpoutKind
    state_kind: StateKind
    partitions: int = 3
    caps: Caps = field(default_factory=lambda: Caps(per_partition=4, per_batch=9))
    max_pending: int = 1
    retention: int = 16
    accept_at_least_once: bool = False
    coordinator_class: type[Coordinator] = Coordinator

    def __post_init__(self) -> None:
        self.source = MemorySource(Partition(TOPIC, p) for p in range(self.partitions))
        self.backing = FlakyBackingMap()
        self.store = MemoryTransactionalStateStore("world")
        self.faults = Faults()
        self.metrics = Metrics(CollectorRegistry())
        self.coordinator = self.new_coordinator()

    def new_coordinator(self) -> Coordinator:
        spout = MemorySpout(self.source, self.spout_kind, topology_id="world")
        state = MAPS[self.state_kind](self.backing, metrics=self.metrics.states.bound("world"))
        executor = LocalExecutor(spout.emitter(), [Sink(state, Count(), key=lambda r: (r.value.decode(),))])
        config = CoordinatorConfig(caps=self.caps, max_pending=self.max_pending, retention=self.retention,
                                   owner="world-owner",
                                   retry_backoff_s=(0.0, 0.0), idle_sleep_s=0.0,
                                   accept_at_least_once=self.accept_at_least_once)
        coord = self.coordinator_class("world", spout, executor, self.store, config, metrics=self.metrics,
                                       faults=self.faults)
        coord.start()
        return coord

    def restart(self) -> None:
        """Crash the coordinator (no lease release, nothing in memory kept) and start a new one."""
        self.coordinator.close(release=False)
        self.coordinator = self.new_coordinator()

    def append(self, partition: int, key: str) -> None:
        self.source.append(Partition(TOPIC, partition), None, key.encode())

    def heal(self) -> None:
        """Every partition available and fully visible, no faults armed."""
        for p in self.source.partitions():
            self.source.set_available(p, True)
            self.source.set_visible(p, None)
        self.faults.armed.clear()
        self.backing.fail_after = None

    def stored_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k, v in self.backing.data.items():
            assert isinstance(k, tuple)
            stored = v if self.state_kind is StateKind.NON_TRANSACTIONAL else getattr(v, "curr", getattr(v, "val", None))
            assert isinstance(stored, int)
            out[k[0]] = stored
        return out

    def truth(self) -> dict[str, int]:
        """Ground truth straight from the source's records, independent of the coordinator."""
        return dict(Counter(_text(r.value) for r in self.source.all_records()))


def _text(value: bytes | None) -> str:
    """A record's value as text (the harness's records always have one)."""
    assert value is not None
    return value.decode()
