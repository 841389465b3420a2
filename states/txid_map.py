"""The map state shared by the opaque and transactional kinds: values that carry their txid."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from states.cas import cas_update
from states.errors import CommitProtocolError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import BackingMap, Updater
from states.spec import StateKind
from states.values import OpaqueValue, TransactionalValue


class TxidMap:
    """Applies ``value_type.next(stored, txid, updater)`` for the txid between begin_commit and commit.

    Like Trident's cached batch reads, a key written earlier in the same commit is read, and
    updated again, from the value this commit wrote.
    """

    kind: ClassVar[StateKind]
    value_type: ClassVar[type[OpaqueValue[Any] | TransactionalValue[Any]]]  # owns the rule

    def __init__(self, backing: BackingMap[Any, Any], *, max_cas_attempts: int = 8, metrics: StateMetrics = STATE_METRICS) -> None:
        self.backing, self._max_attempts, self._metrics = backing, max_cas_attempts, metrics
        self._txid: int | None = None
        self._written: set[Hashable] = set()  # keys this map wrote since begin_commit

    def begin_commit(self, txid: int) -> None:
        self._txid, self._written = txid, set()

    def commit(self, txid: int) -> None:
        self._txid, self._written = None, set()

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The values the batch being committed sees, as Trident's ``multiGet`` returns them.

        Outside a commit, and for keys this map wrote in the current commit: the current value.
        Otherwise ``stored.get(txid)``: for opaque state that is ``prev`` when the stored txid is the
        batch's own (a replay must not see its earlier attempt), so an updater that reads with
        ``multi_get`` and writes with ``multi_put`` stays exactly-once.
        """
        txid, written = self._txid, self._written
        out = []
        for k, v in zip(keys, self.backing.multi_get(keys), strict=True):
            try:
                out.append(None if v is None else v.current if k in written else v.get(txid))
            except StaleBatchError as e:
                raise StaleBatchError(e.batch_txid, e.stored_txid, k) from None
        return out

    def multi_update(self, keys: Sequence[Hashable], updaters: Sequence[Updater]) -> list[Any]:
        if self._txid is None:
            msg = "multi_update outside begin_commit/commit"
            raise CommitProtocolError(msg)
        txid, rule, written = self._txid, self.value_type.next, self._written
        wrote: dict[Hashable, bool] = {}  # key -> this call changed it (a skipped replay does not)

        def compute(key: Hashable, stored: Any, updater: Updater) -> Any:  # stored: this kind's value or None
            if key in written and stored is not None and stored.txid == txid:
                new = stored.amend(updater)  # this commit already wrote the key: build on that
            else:
                new = rule(stored, txid, updater)
            wrote[key] = new is not stored
            return new

        computes = [lambda s, k=k, u=u: compute(k, s, u) for k, u in zip(keys, updaters, strict=True)]
        stored = cas_update(self.backing, keys, computes, max_attempts=self._max_attempts, metrics=self._metrics)
        written.update(k for k, w in wrote.items() if w)
        return [v.current for v in stored]

    def multi_put(self, keys: Sequence[Hashable], values: Sequence[Any]) -> None:
        self.multi_update(keys, [_replace_with(v) for v in values])


def _replace_with(value: Any) -> Updater:
    """The updater that ignores the stored value: what ``multi_put`` applies."""
    return lambda _stored: value
