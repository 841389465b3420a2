"""MemoryTransactionalStateStore: the transactional-state store and lease, in memory."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Sequence

from states.errors import LeaseHeldError, LeaseLostError
from states.protocols import Json, LeaseInfo


class MemoryTransactionalStateStore:
    """Documents by key plus a lease (owner, epoch, expiry); writes fenced by the epoch.

    ``clock`` is injectable so tests can expire leases without sleeping.
    """

    def __init__(self, topology_id: str = "test", clock: Callable[[], float] = time.monotonic) -> None:
        self.topology_id, self._clock = topology_id, clock
        self._docs: dict[str, Json] = {}
        self._owner: str | None = None
        self._epoch = 0
        self._expires = 0.0
        self._lock = threading.Lock()

    def get(self, key: str) -> Json | None:
        with self._lock:
            return copy.deepcopy(self._docs.get(key))

    def put(self, key: str, value: Json, *, epoch: int) -> None:
        with self._lock:
            self._check_epoch(epoch)
            self._docs[key] = copy.deepcopy(value)

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        with self._lock:
            self._check_epoch(epoch)
            for k in keys:
                self._docs.pop(k, None)

    def keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self._docs if k.startswith(prefix))

    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        with self._lock:
            now = self._clock()
            if self._owner not in (None, owner) and now < self._expires:
                raise LeaseHeldError(self.topology_id, self._owner, self._epoch)
            self._owner, self._epoch, self._expires = owner, self._epoch + 1, now + ttl_s
            return self._epoch

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        with self._lock:
            now = self._clock()
            if self._owner != owner or self._epoch != epoch or now >= self._expires:
                raise LeaseLostError(self.topology_id, epoch, self._epoch)
            self._expires = now + ttl_s

    def release_lease(self, owner: str, epoch: int) -> None:
        with self._lock:
            if self._owner == owner and self._epoch == epoch:
                self._owner, self._expires = None, 0.0

    def lease_info(self) -> LeaseInfo | None:
        with self._lock:
            remaining = self._expires - self._clock()
            if self._owner is None or remaining <= 0:
                return None
            return LeaseInfo(self._owner, self._epoch, time.time() + remaining)

    def _check_epoch(self, epoch: int) -> None:
        if epoch != self._epoch:
            raise LeaseLostError(self.topology_id, epoch, self._epoch)
