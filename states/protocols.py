"""The small protocols every state, backing map and transactional-state store implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from states.spec import StateKind

K_contra = TypeVar("K_contra", contravariant=True)  # keys are only ever passed in
V = TypeVar("V")
#: What ``json.dumps`` accepts: dict / list / str / int / float / bool / None, nested. (``Any``:
#: mypy cannot spell a recursive JSON type that callers' plain dicts would satisfy.)
Json = Any
#: A value update: the stored value (None when the key is new) -> the new value. Values are the
#: user's aggregates (a count, a tuple of columns), hence ``Any``.
Updater = Callable[[Any], Any]


@runtime_checkable
class State(Protocol):
    """Told when a batch's state update begins and ends (Trident's ``State``)."""

    def begin_commit(self, txid: int) -> None: ...

    def commit(self, txid: int) -> None: ...


@runtime_checkable
class MapState(State, Protocol[K_contra, V]):
    """A keyed state: read values, apply per-key updaters for the current txid, or overwrite. ``kind`` is the
    fault-tolerance rule it applies."""

    @property
    def kind(self) -> StateKind: ...

    def multi_get(self, keys: Sequence[K_contra]) -> list[V | None]: ...

    def multi_update(self, keys: Sequence[K_contra], updaters: Sequence[Updater]) -> list[V]: ...

    def multi_put(self, keys: Sequence[K_contra], values: Sequence[V]) -> None: ...


@runtime_checkable
class Snapshottable(State, Protocol[V]):
    """A single global value (a global aggregate): Trident's ``Snapshottable``."""

    def get(self) -> V | None: ...

    def update(self, updater: Updater) -> V: ...

    def set(self, value: V) -> None: ...


@runtime_checkable
class BackingMap(Protocol[K_contra, V]):
    """Storage of stored values (opaque, transactional or plain) by key: two methods."""

    def multi_get(self, keys: Sequence[K_contra]) -> list[V | None]: ...

    def multi_put(self, keys: Sequence[K_contra], values: Sequence[V]) -> None: ...


@dataclass(frozen=True, slots=True)
class CasResult(Generic[V]):
    """Outcome of one compare-and-set: applied, or not applied together with the current value."""

    applied: bool
    current: V | None = None


@runtime_checkable
class CasBackingMap(BackingMap[K_contra, V], Protocol[K_contra, V]):
    """A backing map that can write a value only if the stored one is still ``expected``.

    ``expected`` None means "only if absent". A result that is not applied carries the value
    stored now, so the caller recomputes from it without another read. Unknown outcomes (a
    timed-out compare-and-set) are resolved inside the implementation: what comes back is known.
    """

    def multi_cas(
        self, keys: Sequence[K_contra], expected: Sequence[V | None], values: Sequence[V]
    ) -> list[CasResult[V]]: ...


@runtime_checkable
class TransactionalStateStore(Protocol):
    """Durable small JSON documents of one topology (Trident's ``TransactionalState``).

    Writes are fenced by the coordinator lease: ``put`` and ``delete`` with an ``epoch`` that is
    no longer current raise :class:`~states.errors.LeaseLostError` and change nothing.
    """

    topology_id: str

    def get(self, key: str) -> Json | None: ...

    def put(self, key: str, value: Json, *, epoch: int) -> None: ...

    def delete(self, keys: Sequence[str], *, epoch: int) -> None: ...

    def keys(self, prefix: str) -> list[str]:
        """The stored keys starting with ``prefix``, sorted."""
        ...


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    """Who holds a topology's coordinator lease now, read without taking it.

    ``expires_at`` is wall-clock UNIX seconds, or None when the backend cannot tell.
    """

    owner: str
    epoch: int
    expires_at: float | None


@runtime_checkable
class CoordinatorStore(TransactionalStateStore, Protocol):
    """A transactional-state store that also holds the topology's coordinator lease.

    One active coordinator per topology: a lease with a TTL and an epoch that grows on every
    takeover; the store's fenced writes take that epoch.
    """

    def acquire_lease(self, owner: str, ttl_s: float) -> int:
        """Take the lease if free or expired (or already ours); returns the new epoch."""
        ...

    def renew_lease(self, owner: str, epoch: int, ttl_s: float) -> None:
        """Extend our lease; raises LeaseLostError if ``epoch`` is no longer current."""
        ...

    def release_lease(self, owner: str, epoch: int) -> None:
        """Give the lease up (a no-op if it is no longer ours). A store that cannot tell whether it did raises a
        :class:`~states.errors.StateError`: the caller says so, and the lease expires with its TTL."""
        ...

    def lease_info(self) -> LeaseInfo | None:
        """The current holder, read without taking the lease; None if never taken, released or expired."""
        ...
