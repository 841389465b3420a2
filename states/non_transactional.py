"""NonTransactionalMap: applies every update, replays included (at-least-once)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from states.cas import cas_update
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import BackingMap, Updater
from states.spec import StateKind


class NonTransactionalMap:
    """Map state storing bare values: a replayed batch is counted again (Trident's ``NonTransactionalMap``)."""

    kind = StateKind.NON_TRANSACTIONAL

    def __init__(self, backing: BackingMap[Any, Any], *, max_cas_attempts: int = 8, metrics: StateMetrics = STATE_METRICS) -> None:
        self.backing, self._max_attempts, self._metrics = backing, max_cas_attempts, metrics

    def begin_commit(self, txid: int) -> None:
        pass

    def commit(self, txid: int) -> None:
        pass

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        return self.backing.multi_get(keys)

    def multi_update(self, keys: Sequence[Hashable], updaters: Sequence[Updater]) -> list[Any]:
        return cas_update(self.backing, keys, updaters, max_attempts=self._max_attempts, metrics=self._metrics)

    def multi_put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        self.backing.multi_put(keys, values)
