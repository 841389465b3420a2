"""CachedMap: an LRU cache between a map state and its backing map.

It sits directly over storage, ``OpaqueMap(CachedMap(backing))``, so it caches *stored* values
(with their txids). A cached value may be stale when another writer (a zombie, a retried task)
wrote since: with a compare-and-set backing map that only costs a failed CAS, which returns the
current value and refreshes the cache. Over a plain backing map use it only with a single writer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from states.protocols import BackingMap, CasBackingMap, CasResult

_MISSING = object()


class CachedMap:
    """LRU read-through, write-through cache of up to ``size`` stored values."""

    def __new__(cls, backing: BackingMap[Any, Any], size: int = 10_000) -> CachedMap:
        if cls is CachedMap and isinstance(backing, CasBackingMap):
            cls = CasCachedMap
        return super().__new__(cls)

    def __init__(self, backing: BackingMap[Any, Any], size: int = 10_000) -> None:
        if size < 1:
            raise ValueError("cache size must be >= 1")
        self.backing, self.size = backing, size
        self._lru: OrderedDict[Any, Any] = OrderedDict()

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        found = [self._lru.get(k, _MISSING) for k in keys]
        missing = [k for k, v in zip(keys, found) if v is _MISSING]
        if missing:
            loaded = dict(zip(missing, self.backing.multi_get(missing), strict=True))
            found = [loaded[k] if v is _MISSING else v for k, v in zip(keys, found)]
            self._remember(loaded.items())
        for k in keys:
            if k in self._lru:
                self._lru.move_to_end(k)
        return found

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        try:
            self.backing.multi_put(keys, values)
        except BaseException:
            self.invalidate(keys)  # some may have been written: the cache can't know which
            raise
        self._remember(zip(keys, values))

    def invalidate(self, keys: Sequence[Any] | None = None) -> None:
        """Forget ``keys`` (all keys when None)."""
        if keys is None:
            self._lru.clear()
        for k in keys or ():
            self._lru.pop(k, None)

    def _remember(self, items: Any) -> None:
        for k, v in items:
            self._lru[k] = v
            self._lru.move_to_end(k)
        while len(self._lru) > self.size:
            self._lru.popitem(last=False)


class CasCachedMap(CachedMap):
    """The cache over a compare-and-set backing map: failed CAS results refresh the cache."""

    backing: CasBackingMap[Any, Any]

    def multi_cas(self, keys: Sequence[Any], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        try:
            results = self.backing.multi_cas(keys, expected, values)
        except BaseException:
            self.invalidate(keys)
            raise
        self._remember((k, v if r.applied else r.current) for k, v, r in zip(keys, values, results, strict=True))
        return results
