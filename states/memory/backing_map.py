"""MemoryBackingMap: a dict with compare-and-set, thread-safe."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

from states.protocols import CasResult


class MemoryBackingMap:
    """Stored values in a dict; ``multi_cas`` has the same semantics as the durable backends."""

    def __init__(self) -> None:
        self.data: dict[Hashable, Any] = {}  # key -> stored value
        self._lock = threading.Lock()

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        with self._lock:
            return [self.data.get(k) for k in keys]

    def multi_put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        with self._lock:
            self.data.update(zip(keys, values, strict=True))

    def multi_cas(self, keys: Sequence[Hashable], expected: Sequence[Any], values: Sequence[Any]) -> list[CasResult[Any]]:
        out: list[CasResult[Any]] = []
        with self._lock:
            for k, e, v in zip(keys, expected, values, strict=True):
                current = self.data.get(k)
                if current == e:
                    self.data[k] = v
                    out.append(CasResult(True))
                else:
                    out.append(CasResult(False, current))
        return out
