"""RotatingTransactionalState: per-txid metadata in a store, with a bounded retention window."""

from __future__ import annotations

import bisect

from states.protocols import Json, TransactionalStateStore


class RotatingTransactionalState:
    """Metadata by txid under ``namespace`` in a :class:`TransactionalStateStore`.

    Trident keeps one of these per spout: the metadata stored for txid N is what batch N read.
    Writes are fenced with ``epoch``. Keys are zero-padded so the store's key order is txid order.
    Traps: ``get_previous_state(N)`` is the latest state *strictly before* N, which is where a
    replay of N must start from; states only ever come from the store, never from memory alone.
    """

    def __init__(self, store: TransactionalStateStore, namespace: str, *, epoch: int, retention: int = 16) -> None:
        if retention < 1:
            msg = "retention must be >= 1"
            raise ValueError(msg)
        self._store, self._ns, self.epoch, self.retention = store, namespace.rstrip("/"), epoch, retention
        self._txids = sorted(self._txid_of(k) for k in store.keys(self._ns + "/"))
        self._cache: dict[int, Json] = {}

    def _key(self, txid: int) -> str:
        return f"{self._ns}/{txid:020d}"

    def _txid_of(self, key: str) -> int:
        return int(key.rsplit("/", 1)[1])

    @property
    def txids(self) -> list[int]:
        """The txids with stored states, ascending."""
        return list(self._txids)

    def get_state(self, txid: int) -> Json | None:
        """The state stored for exactly ``txid``, or None."""
        if txid not in self._cache:
            i = bisect.bisect_left(self._txids, txid)
            if i == len(self._txids) or self._txids[i] != txid:
                return None
            self._cache[txid] = self._store.get(self._key(txid))
        return self._cache[txid]

    def get_previous_state(self, txid: int) -> Json | None:
        """The state of the greatest stored txid below ``txid``, or None."""
        i = bisect.bisect_left(self._txids, txid)
        return self.get_state(self._txids[i - 1]) if i else None

    def override_state(self, txid: int, state: Json) -> None:
        """Store ``state`` for ``txid`` (fenced by the lease epoch)."""
        self._store.put(self._key(txid), state, epoch=self.epoch)
        if txid not in self._cache and txid not in self._txids:
            bisect.insort(self._txids, txid)
        self._cache[txid] = state

    def cleanup_before(self, txid: int) -> None:
        """Forget every state older than ``txid`` (they can never be replayed again)."""
        old = [t for t in self._txids if t < txid]
        if old:
            self._store.delete([self._key(t) for t in old], epoch=self.epoch)
            self._txids = [t for t in self._txids if t >= txid]
            for t in old:
                self._cache.pop(t, None)

    def rotate(self, committed_txid: int) -> None:
        """After ``committed_txid`` commits, keep only the retention window of states."""
        self.cleanup_before(committed_txid - self.retention + 1)
