"""The coordinator's view of its store: every fenced write checks the heartbeat's verdict first."""

from __future__ import annotations

from collections.abc import Sequence

from app.coordinator.lease import LeaseKeeper
from states.protocols import CoordinatorStore, Json


class FencedStore:
    """Nothing is written once the lease counts as lost; the store's epoch check stays the real fence."""

    def __init__(self, store: CoordinatorStore, lease: LeaseKeeper) -> None:
        self._store, self._lease, self.topology_id = store, lease, store.topology_id

    def get(self, key: str) -> Json | None:
        return self._store.get(key)

    def keys(self, prefix: str) -> list[str]:
        return self._store.keys(prefix)

    def put(self, key: str, value: Json, *, epoch: int) -> None:
        self._lease.check()
        self._store.put(key, value, epoch=epoch)

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        self._lease.check()
        self._store.delete(keys, epoch=epoch)
