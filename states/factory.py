"""StateFactory: how any process (driver or Spark executor) opens a pipeline's state and store.

A factory is small, frozen and picklable: it is shipped to executors, which call
:meth:`StateFactory.make_state` once per process and reuse what it returns (a warm cache and one
database session per process). Trident's ``StateFactory.makeState``, keyed by the table spec.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from states.cached import CachedMap
from states.non_transactional import NonTransactionalMap
from states.opaque import OpaqueMap
from states.spec import MapSpec, StateKind, check_identifier
from states.transactional import TransactionalMap

BACKENDS = ("memory", "sqlite", "cassandra")
_MAPS = {StateKind.OPAQUE: OpaqueMap, StateKind.TRANSACTIONAL: TransactionalMap,
         StateKind.NON_TRANSACTIONAL: NonTransactionalMap}
_opened: dict[tuple[Any, ...], Any] = {}  # per process: (factory, spec or topology) -> state or store
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class StateFactory:
    """Backend and kind of a map state. ``sqlite_path`` for sqlite; ``cassandra`` settings for cassandra."""

    kind: StateKind = StateKind.OPAQUE
    backend: str = "sqlite"
    sqlite_path: str | None = None
    cassandra: Any = None  # states.cassandra.CassandraSettings (imported lazily: the driver is heavy)
    cache_size: int = 10_000

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown state backend {self.backend!r} (one of {', '.join(BACKENDS)})")
        if self.backend == "sqlite" and not self.sqlite_path:
            raise ValueError("the sqlite backend needs sqlite_path")
        if self.backend == "cassandra" and self.cassandra is None:
            raise ValueError("the cassandra backend needs cassandra settings")
        if self.cache_size < 0:
            raise ValueError("cache_size must be >= 0 (0 disables the cache)")

    def make_state(self, spec: MapSpec) -> Any:
        """The map state for ``spec`` in this process, opened once and reused."""
        if spec.kind is not self.kind:
            raise ValueError(f"table {spec.table}: spec kind {spec.kind.value} != factory kind {self.kind.value}")
        return self._once(("state", spec), lambda: self._wrap(self.backing_map(spec)))

    def backing_map(self, spec: MapSpec) -> Any:
        check_identifier(spec.table, "table name")
        if self.backend == "memory":
            from states.memory import MemoryBackingMap

            return self._once(("backing", spec), MemoryBackingMap)
        if self.backend == "sqlite":
            from states.sqlite import SqliteBackingMap

            return SqliteBackingMap(self.sqlite_path, spec)
        from states.cassandra import CassandraBackingMap

        return CassandraBackingMap(self.cassandra, spec)

    def txstate_store(self, topology_id: str) -> Any:
        """The transactional-state store (and lease) of ``topology_id`` on the same backend."""
        def open_store() -> Any:
            if self.backend == "memory":
                from states.memory import MemoryTransactionalStateStore

                return MemoryTransactionalStateStore(topology_id)
            if self.backend == "sqlite":
                from states.sqlite import SqliteTransactionalStateStore

                return SqliteTransactionalStateStore(self.sqlite_path, topology_id)
            from states.cassandra import CassandraTransactionalStateStore

            return CassandraTransactionalStateStore(self.cassandra, topology_id)

        return self._once(("store", topology_id), open_store)

    def _wrap(self, backing: Any) -> Any:
        inner = CachedMap(backing, self.cache_size) if self.cache_size else backing
        return _MAPS[self.kind](inner)

    def _once(self, what: tuple[Any, ...], make: Any) -> Any:
        key = (self, *what)
        with _lock:
            if key not in _opened:
                _opened[key] = make()
            return _opened[key]


def forget_opened() -> None:
    """Drop every state this process opened (tests that simulate a fresh process)."""
    with _lock:
        _opened.clear()
