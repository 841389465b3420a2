"""LRU caches between a map state and its backing map, one per kind of backing map.

A cache sits directly over storage, ``OpaqueMap(CasCachedMap(backing))``, so it caches *stored*
values (with their txids). A cached value may be stale when another writer (a zombie, a retried
task) wrote since:

* :class:`CasCachedMap` wraps a :class:`~states.protocols.CasBackingMap` and is one: a stale
  entry only costs a failed compare-and-set, which returns the current value and refreshes the
  cache. This is the cache for shared state (every backend of this project).
* :class:`CachedMap` wraps a plain :class:`~states.protocols.BackingMap` and has no
  compare-and-set, so writes through it are unconditional: use it only with a single writer.
  (Over a compare-and-set map it would hide ``multi_cas``: choose :class:`CasCachedMap` there.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

from states.protocols import BackingMap, CasBackingMap, CasResult

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CachedMap(Generic[K, V]):
    """LRU read-through, write-through cache of up to ``size`` stored values over a backing map."""

    def __init__(self, backing: BackingMap[K, V], size: int = 10_000) -> None:
        if size < 1:
            raise ValueError("cache size must be >= 1")
        self.backing, self.size = backing, size
        self._lru: OrderedDict[K, V | None] = OrderedDict()

    def multi_get(self, keys: Sequence[K]) -> list[V | None]:
        missing = [k for k in keys if k not in self._lru]
        loaded = dict(zip(missing, self.backing.multi_get(missing), strict=True)) if missing else {}
        found = [loaded[k] if k in loaded else self._lru[k] for k in keys]
        self._remember(loaded.items())
        for k in keys:
            if k in self._lru:
                self._lru.move_to_end(k)
        return found

    def multi_put(self, keys: Sequence[K], values: Sequence[V]) -> None:
        try:
            self.backing.multi_put(keys, values)
        except BaseException:
            self.invalidate(keys)  # some may have been written: the cache can't know which
            raise
        self._remember(zip(keys, values, strict=True))

    def invalidate(self, keys: Sequence[K] | None = None) -> None:
        """Forget ``keys`` (all keys when None)."""
        if keys is None:
            self._lru.clear()
        for k in keys or ():
            self._lru.pop(k, None)

    def _remember(self, items: Iterable[tuple[K, V | None]]) -> None:
        for k, v in items:
            self._lru[k] = v
            self._lru.move_to_end(k)
        while len(self._lru) > self.size:
            self._lru.popitem(last=False)


class CasCachedMap(CachedMap[K, V]):
    """The cache over a compare-and-set backing map, itself a compare-and-set map.

    A failed compare-and-set carries the value stored now, which replaces the stale entry.
    """

    backing: CasBackingMap[K, V]

    def __init__(self, backing: CasBackingMap[K, V], size: int = 10_000) -> None:
        if not isinstance(backing, CasBackingMap):
            raise TypeError(f"CasCachedMap needs a compare-and-set backing map, not {type(backing).__name__} "
                            f"(use CachedMap over a plain backing map)")
        super().__init__(backing, size)

    def multi_cas(self, keys: Sequence[K], expected: Sequence[V | None],
                  values: Sequence[V]) -> list[CasResult[V]]:
        try:
            results = self.backing.multi_cas(keys, expected, values)
        except BaseException:
            self.invalidate(keys)
            raise
        self._remember((k, v if r.applied else r.current) for k, v, r in zip(keys, values, results, strict=True))
        return results
