"""The map state shared by the opaque and transactional kinds: values that carry their txid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from app.metrics import METRICS, Metrics
from states.cas import write_through
from states.protocols import BackingMap, Updater
from states.spec import StateKind


class TxidMap:
    """Applies ``value_type.next(stored, txid, updater)`` for the txid between begin_commit and commit."""

    kind: ClassVar[StateKind]
    value_type: ClassVar[Any]  # OpaqueValue or TransactionalValue: owns the rule

    def __init__(self, backing: BackingMap[Any, Any], *, max_cas_attempts: int = 8, metrics: Metrics = METRICS) -> None:
        self.backing, self._max_attempts, self._metrics = backing, max_cas_attempts, metrics
        self._txid: int | None = None

    def begin_commit(self, txid: int) -> None:
        self._txid = txid

    def commit(self, txid: int) -> None:
        self._txid = None

    def multi_get(self, keys: Sequence[Any]) -> list[Any]:
        """Current values as a reader sees them."""
        return [None if v is None else v.current for v in self.backing.multi_get(keys)]

    def multi_update(self, keys: Sequence[Any], updaters: Sequence[Updater]) -> list[Any]:
        if self._txid is None:
            raise RuntimeError("multi_update outside begin_commit/commit")
        txid, rule = self._txid, self.value_type.next
        computes = [lambda s, u=u: rule(s, txid, u) for u in updaters]
        stored = write_through(self.backing, keys, computes, max_attempts=self._max_attempts, metrics=self._metrics)
        return [v.current for v in stored]

    def multi_put(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        self.multi_update(keys, [lambda _old, v=v: v for v in values])
