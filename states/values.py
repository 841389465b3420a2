"""The opaque and transactional update rules, as pure value objects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from states.errors import StaleBatchError
from states.protocols import Updater

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OpaqueValue(Generic[T]):
    """``(txid, curr, prev)``: ``curr`` includes batch ``txid``; ``prev`` is the value before it.

    A replay of the same txid recomputes from ``prev`` (the earlier attempt may have carried
    different records), a newer txid builds on ``curr``, an older one is refused.
    """

    txid: int
    curr: T | None
    prev: T | None = None

    @property
    def current(self) -> T | None:
        """The value readers see."""
        return self.curr

    def get(self, batch_txid: int | None) -> T | None:
        """The value batch ``batch_txid`` sees (Trident's ``OpaqueValue.get``): ``curr``, or ``prev``
        while that very txid is being replayed; None (no batch) sees ``curr``."""
        return self.curr if batch_txid is None else self.base_for(batch_txid)

    def base_for(self, batch_txid: int) -> T | None:
        """The value batch ``batch_txid`` must build on."""
        if batch_txid > self.txid:
            return self.curr
        if batch_txid == self.txid:
            return self.prev
        raise StaleBatchError(batch_txid, self.txid)

    def update(self, batch_txid: int, new_curr: T) -> OpaqueValue[T]:
        """The stored value after batch ``batch_txid`` produced ``new_curr``."""
        prev = self.base_for(batch_txid)
        return OpaqueValue(batch_txid, new_curr, prev)

    def amend(self, updater: Updater) -> OpaqueValue[T]:
        """A second update within the commit that wrote this value builds on ``curr``, keeping ``prev``."""
        return OpaqueValue(self.txid, updater(self.curr), self.prev)

    @staticmethod
    def next(stored: OpaqueValue[T] | None, batch_txid: int, updater: Updater) -> OpaqueValue[T]:
        """Apply ``updater`` for ``batch_txid`` to ``stored`` (None when the key is new)."""
        if stored is None:
            return OpaqueValue(batch_txid, updater(None), None)
        return stored.update(batch_txid, updater(stored.base_for(batch_txid)))


@dataclass(frozen=True, slots=True)
class TransactionalValue(Generic[T]):
    """``(txid, val)``: if the stored txid equals the batch's, the batch is already applied."""

    txid: int
    val: T | None

    @property
    def current(self) -> T | None:
        """The value readers see."""
        return self.val

    def get(self, batch_txid: int | None) -> T | None:
        """The value any batch sees: ``val`` (Trident's ``TransactionalMap.multiGet``). A replay of
        an applied txid reads it too, and its writes are skipped by :meth:`next`."""
        return self.val

    def amend(self, updater: Updater) -> TransactionalValue[T]:
        """A second update within the commit that wrote this value applies on top of it."""
        return TransactionalValue(self.txid, updater(self.val))

    @staticmethod
    def next(stored: TransactionalValue[T] | None, batch_txid: int, updater: Updater) -> TransactionalValue[T]:
        """Apply ``updater`` for ``batch_txid``; returns ``stored`` itself when already applied."""
        if stored is None:
            return TransactionalValue(batch_txid, updater(None))
        if stored.txid == batch_txid:
            return stored
        if stored.txid > batch_txid:
            raise StaleBatchError(batch_txid, stored.txid)
        return TransactionalValue(batch_txid, updater(stored.val))
