"""StateFactory: how any process (driver or Spark executor) opens a pipeline's state and store.

A factory is small, frozen and picklable: it is shipped to executors, which call
:meth:`StateFactory.make_state` once per process and reuse what it returns (a warm cache and one
database session per process). Trident's ``StateFactory.makeState``, keyed by the table spec.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from states.cached import CasCachedMap
from states.errors import StateTableMissingError
from states.layout import RowLayout
from states.limits import KeyLimits
from states.metrics import STATE_METRICS, StateMetrics
from states.non_transactional import NonTransactionalMap
from states.opaque import OpaqueMap
from states.protocols import CasBackingMap, CoordinatorStore, MapState
from states.reader import TableReader
from states.spec import MapSpec, StateKind, check_identifier
from states.transactional import TransactionalMap

if TYPE_CHECKING:  # the driver is heavy: imported only where a Cassandra backend is opened
    from states.cassandra.settings import CassandraSettings

BACKENDS = ("memory", "sqlite", "cassandra")
#: Backends whose data lives in one process's memory: another process opening them sees other data.
IN_ONE_PROCESS = frozenset({"memory"})
#: Backends whose data lives on one machine's disk: every process of that machine sees one copy, a
#: process on another machine (a Spark executor of a cluster) opens a copy of its own.
ON_ONE_MACHINE = frozenset({"sqlite"})


def on_one_machine(backend: str) -> bool:
    """Whether ``backend`` keeps its data on one machine (its disk or a process's memory): processes on
    other machines would each open a copy of their own, and the state would split between them."""
    return backend in IN_ONE_PROCESS | ON_ONE_MACHINE
_MAPS: dict[StateKind, type[OpaqueMap | TransactionalMap | NonTransactionalMap]] = {
    StateKind.OPAQUE: OpaqueMap, StateKind.TRANSACTIONAL: TransactionalMap,
    StateKind.NON_TRANSACTIONAL: NonTransactionalMap}
_opened: dict[tuple[object, ...], object] = {}  # per process: (factory, spec or topology) -> state or store
_lock = threading.RLock()  # re-entered: a memory state opens its backing map through _once too
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StateFactory:
    """Backend and kind of a map state. ``sqlite_path`` for sqlite; ``cassandra`` settings for cassandra.

    ``pipeline`` labels every metric the opened states record (``trident_cas_*``,
    ``trident_state_requests_total``); a topology sets it to its id when a sink is added, and a
    store's metrics carry its topology id."""

    kind: StateKind = StateKind.OPAQUE
    backend: str = "sqlite"
    sqlite_path: str | None = None
    cassandra: CassandraSettings | None = None
    cache_size: int = 10_000
    pipeline: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            msg = f"unknown state backend {self.backend!r} (one of {', '.join(BACKENDS)})"
            raise ValueError(msg)
        if self.backend == "sqlite" and not self.sqlite_path:
            msg = "the sqlite backend needs sqlite_path"
            raise ValueError(msg)
        if self.backend == "cassandra" and self.cassandra is None:
            msg = "the cassandra backend needs cassandra settings"
            raise ValueError(msg)
        if self.cache_size < 0:
            msg = "cache_size must be >= 0 (0 disables the cache)"
            raise ValueError(msg)

    def sqlite_file(self) -> str:
        """``sqlite_path``, which the sqlite backend requires (checked when the factory is made)."""
        if not self.sqlite_path:
            msg = "the sqlite backend needs sqlite_path"
            raise ValueError(msg)
        return self.sqlite_path

    def cassandra_settings(self) -> CassandraSettings:
        """``cassandra``, which the cassandra backend requires (checked when the factory is made)."""
        if self.cassandra is None:
            msg = "the cassandra backend needs cassandra settings"
            raise ValueError(msg)
        return self.cassandra

    def shards_of(self, table: str) -> int:
        """The shards ``table`` is used with (``states.cassandra.shards``); 0: a partition per key, or not Cassandra.
        With ``cassandra.shards`` unset, the count the table was created with (one schema read per process)."""
        if self.backend != "cassandra" or self.cassandra is None:
            return 0
        if self.cassandra.shards is not None:
            return self.cassandra.shards
        from states.cassandra.schema import shards_in_use
        from states.cassandra.session import shared_client

        s = self.cassandra
        return shards_in_use(shared_client(s), s.keyspace, table, s.shards, self.metrics)

    @property
    def shared_across_processes(self) -> bool:
        """Whether every process of one machine that opens this state sees the same data (Spark
        executors need it; on several machines see :attr:`on_one_machine`)."""
        return self.backend not in IN_ONE_PROCESS

    @property
    def on_one_machine(self) -> bool:
        """Whether this state's data lives on one machine's disk (or memory): processes on other
        machines would each open a copy of their own, so the state would split between them."""
        return on_one_machine(self.backend)

    def make_state(self, spec: MapSpec, *, committed_txid: int = 0, create: bool | None = None) -> MapState[Any, Any]:
        """The map state for ``spec`` in this process, opened once and reused.

        ``committed_txid``: the last txid committed into the table (0: none, so it may be created if
        absent); ``create`` overrides that (False: a reader, which never creates a table)."""
        if spec.kind is not self.kind:
            msg = f"table {spec.table}: spec kind {spec.kind.value} != factory kind {self.kind.value}"
            raise ValueError(msg)
        return self._once(("state", spec), lambda: self._wrap(self.backing_map(
            spec, create=committed_txid == 0 if create is None else create, committed_txid=committed_txid)))

    def make_cached_state(self, spec: MapSpec, entries: Iterable[tuple[Any, Any]] = (), size: int = 0,
                          absent_rate: float | None = 1.0, *, committed_txid: int = 0, create: bool | None = None,
                          ) -> tuple[MapState[Any, Any], CasCachedMap[Any, Any] | None]:
        """A map state with a cache of its own over this process's backing map, and that cache.

        For a cache that outlives the state (one per commit partition, see ``app.spark.tasks``):
        seeded with ``entries`` and the estimate of absent misses it had (``absent_rate``, see
        :class:`~states.cached.CasCachedMap`), holding ``max(size, cache_size)`` values; no cache
        when ``cache_size`` is 0. ``committed_txid`` and ``create`` as for :meth:`make_state`.
        """
        if spec.kind is not self.kind:
            msg = f"table {spec.table}: spec kind {spec.kind.value} != factory kind {self.kind.value}"
            raise ValueError(msg)
        backing = self._once(("process backing", spec), lambda: self.backing_map(
            spec, create=committed_txid == 0 if create is None else create, committed_txid=committed_txid))
        if not self.cache_size:
            return _MAPS[self.kind](backing, metrics=self.metrics), None
        cache = CasCachedMap(backing, max(size, self.cache_size), entries, absent_rate=absent_rate)
        return _MAPS[self.kind](cache, metrics=self.metrics), cache

    def key_limits(self, spec: MapSpec) -> KeyLimits | None:
        """What this backend refuses in ``spec``'s keys (None: it stores any non-null key)."""
        if self.backend != "cassandra":
            return None
        from states.cassandra.limits import key_limits

        return key_limits(RowLayout(spec))

    def where(self, spec: MapSpec) -> str:
        """Where ``spec``'s table lives, as messages and the progress log name it: ``keyspace.table`` or ``table``."""
        return f"{self.cassandra.keyspace}.{spec.table}" if self.cassandra is not None else spec.table

    def has_table(self, spec: MapSpec) -> bool:
        """Whether ``spec``'s table exists now (the memory backend has no tables to lose: always)."""
        if self.backend == "memory":
            return True
        return bool(self.reader().column_types(spec.table))

    def reader(self) -> TableReader:
        """The reader of this backend's state tables (sqlite or cassandra)."""
        if self.backend == "sqlite":
            from states.sqlite.reader import SqliteTableReader

            return SqliteTableReader(self.sqlite_file())
        if self.backend == "cassandra":
            from states.cassandra.reader import CassandraTableReader

            return CassandraTableReader(self.cassandra_settings())
        msg = f"backend {self.backend!r} keeps no table to read"
        raise ValueError(msg)

    def check_table(self, spec: MapSpec, committed_txid: int) -> None:
        """Raise :class:`~states.errors.StateTableMissingError` if ``spec``'s table is missing though txid
        ``committed_txid`` (> 0) was committed into it, and, for a Cassandra table that is there,
        :class:`~states.errors.SchemaMismatchError` if it has another shape (columns, key, shard count); creates
        nothing (a pipeline's start checks this, so an idle pipeline stops too)."""
        if committed_txid > 0 and not self.has_table(spec):
            raise StateTableMissingError(self.where(spec), committed_txid)
        if self.backend == "cassandra":
            self.backing_map(spec, create=False, committed_txid=committed_txid)  # validates the table's shape

    def backing_map(self, spec: MapSpec, *, create: bool = True, committed_txid: int = 0) -> CasBackingMap[Any, Any]:
        """The storage of ``spec`` on this backend (every backend here supports compare-and-set).

        ``create``: create the table if absent; without it a missing table is
        :class:`~states.errors.StateTableMissingError` naming ``committed_txid``, the last txid
        committed into it (the memory backend has no tables to lose)."""
        check_identifier(spec.table, "table name")
        if self.backend == "memory":
            from states.memory import MemoryBackingMap

            if spec.ttl_s is not None:
                msg = f"table {spec.table}: ttl_s needs the cassandra backend (memory rows do not expire)"
                raise ValueError(msg)

            return self._once(("backing", spec), MemoryBackingMap)
        if self.backend == "sqlite":
            from states.sqlite import SqliteBackingMap

            return SqliteBackingMap(self.sqlite_file(), spec, metrics=self.metrics, create=create,
                                    committed_txid=committed_txid)
        from states.cassandra.backing_map import CassandraBackingMap

        return CassandraBackingMap(self.cassandra_settings(), spec, metrics=self.metrics, create=create,
                                   committed_txid=committed_txid)

    def txstate_store(self, topology_id: str) -> CoordinatorStore:
        """The transactional-state store (and lease) of ``topology_id`` on the same backend."""
        def open_store() -> CoordinatorStore:
            if self.backend == "memory":
                from states.memory import MemoryTransactionalStateStore

                return MemoryTransactionalStateStore(topology_id)
            if self.backend == "sqlite":
                from states.sqlite import SqliteTransactionalStateStore

                return SqliteTransactionalStateStore(self.sqlite_file(), topology_id,
                                                     metrics=self._store_metrics(topology_id))
            from states.cassandra.txstate import CassandraTransactionalStateStore

            return CassandraTransactionalStateStore(self.cassandra_settings(), topology_id, metrics=self._store_metrics(topology_id))

        return self._once(("store", topology_id), open_store)

    def _store_metrics(self, topology_id: str) -> StateMetrics:
        """A store belongs to one topology, whose id is the pipeline's: its metrics carry it."""
        return self.metrics if self.pipeline else self._once(("metrics", topology_id),
                                                             lambda: STATE_METRICS.bound(topology_id))

    @property
    def metrics(self) -> StateMetrics:
        """The state metrics of this process, bound to :attr:`pipeline`."""
        return self._once(("metrics",), lambda: STATE_METRICS.bound(self.pipeline))

    def forget(self, spec: MapSpec) -> None:
        """Drop this process's opened state and backing maps of ``spec`` (its table is gone): the next open
        checks the table again, and creates it only where it is asked to."""
        with _lock:
            for what in ("state", "process backing", "backing"):
                _opened.pop((self, what, spec), None)

    def _wrap(self, backing: CasBackingMap[Any, Any]) -> MapState[Any, Any]:
        """``Kind(CasCachedMap(backing))``: the cache that keeps compare-and-set (no cache when size 0)."""
        inner = CasCachedMap(backing, self.cache_size) if self.cache_size else backing
        return _MAPS[self.kind](inner, metrics=self.metrics)

    def _once(self, what: tuple[object, ...], make: Callable[[], T]) -> T:
        key = (self, *what)
        with _lock:
            if key not in _opened:
                _opened[key] = make()
            return cast(T, _opened[key])  # stored under this key by this very call site's ``make``
