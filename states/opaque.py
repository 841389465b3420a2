"""OpaqueMap: exactly-once map state even when a replayed txid carries different records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.metrics import METRICS, Metrics
from states.cas import write_through
from states.protocols import BackingMap, Updater
from states.spec import StateKind
from states.values import OpaqueValue


class OpaqueMap:
    """Map state storing :class:`OpaqueValue` in any backing map (Trident's ``OpaqueMap``)."""

    kind = StateKind.OPAQUE

    def __init__(self, backing: BackingMap[Any, OpaqueValue[Any]], *, max_cas_attempts: int = 8,
                 metrics: Metrics = METRICS) -> None:
        self.backing, self._max_attempts, self._metrics = backing, max_cas_attempts, metrics
        self._txid: int | None = None

    def begin_commit(self, txid: int) -> None:
        self._txid = txid

    def commit(self, txid: int) -> None:
        self._txid = None

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        """Current values as a reader sees them: the latest ``curr``."""
        return [None if v is None else v.curr for v in self.backing.multi_get(keys)]

    def multi_update(self, keys: Sequence[Any], updaters: Sequence[Updater]) -> list[Any]:
        txid = self._require_txid()
        computes = [lambda s, u=u: OpaqueValue.next(s, txid, u) for u in updaters]
        stored = write_through(self.backing, keys, computes, max_attempts=self._max_attempts, metrics=self._metrics)
        return [v.curr for v in stored]

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        self.multi_update(keys, [lambda _old, v=v: v for v in values])

    def _require_txid(self) -> int:
        if self._txid is None:
            raise RuntimeError("multi_update outside begin_commit/commit")
        return self._txid
