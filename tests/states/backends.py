"""The backends the contract suites run against: adding one is one line in each table below.

A backing-map factory takes the map's spec and the pytest request (for fixtures such as a
temporary directory or a CQL server) and returns a :class:`Backend`: the map, and a way to open
a second instance over the same storage (None when not durable).
A store factory returns a :class:`StoreHarness`: the store, a second instance over the same
storage, and a function that makes the current lease expire.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from states.memory import MemoryBackingMap, MemoryTransactionalStateStore
from states.spec import MapSpec
from states.sqlite import SqliteBackingMap, SqliteTransactionalStateStore


@dataclass
class Backend:
    map: Any
    reopen: Callable[[], Any] | None = None


@dataclass
class StoreHarness:
    store: Any
    reopen: Callable[[], Any]
    expire_lease: Callable[[], None]


def memory_map(spec: MapSpec, request: pytest.FixtureRequest) -> Backend:
    return Backend(MemoryBackingMap())


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def memory_store(topology_id: str, request: pytest.FixtureRequest) -> StoreHarness:
    clock = FakeClock()
    store = MemoryTransactionalStateStore(topology_id, clock=clock)

    def expire() -> None:
        clock.now += 10_000

    return StoreHarness(store, lambda: store, expire)


def sqlite_map(spec: MapSpec, request: pytest.FixtureRequest) -> Backend:
    path = request.getfixturevalue("tmp_path") / "state.db"
    opened = [SqliteBackingMap(path, spec)]

    def reopen() -> SqliteBackingMap:
        opened.append(SqliteBackingMap(path, spec))
        return opened[-1]

    request.addfinalizer(lambda: [m.close() for m in opened])
    return Backend(opened[0], reopen)


def sqlite_store(topology_id: str, request: pytest.FixtureRequest) -> StoreHarness:
    path, clock = request.getfixturevalue("tmp_path") / "state.db", FakeClock()
    opened = [SqliteTransactionalStateStore(path, topology_id, clock=clock)]

    def reopen() -> SqliteTransactionalStateStore:
        opened.append(SqliteTransactionalStateStore(path, topology_id, clock=clock))
        return opened[-1]

    def expire() -> None:
        clock.now += 10_000

    request.addfinalizer(lambda: [s.close() for s in opened])
    return StoreHarness(opened[0], reopen, expire)


BACKING_MAPS: dict[str, Callable[[MapSpec, pytest.FixtureRequest], Backend]] = {
    "memory": memory_map,
    "sqlite": sqlite_map,
}

STORES: dict[str, Callable[[str, pytest.FixtureRequest], StoreHarness]] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
}
