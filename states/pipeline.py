"""The compare-and-set loop of :mod:`states.cas`, per key and pipelined through one bounded window.

Over a map whose requests go over the network (Cassandra), ``cas_update`` in steps (read every
key, then compare-and-set every key, then retry the failures) leaves the server idle at each
step's end. A :class:`PipelinedCas` map instead opens a :class:`CasPipe`: reads and
compare-and-sets of different keys share one window of requests in flight, and each key moves on
as soon as its own answer arrives (read -> compute -> compare-and-set -> recompute on conflict).
The rules are :func:`states.cas.cas_update`'s, key by key; only the order of requests differs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import CasResult


class _Read:
    def __repr__(self) -> str:
        return "READ"


READ: Any = _Read()  # what :meth:`CasPipe.plan` says for a key whose stored value must be read


@dataclass(frozen=True, slots=True)
class Stored:
    """The answer to a read: the stored value, None when absent."""

    value: Any


Answer = Stored | CasResult[Any]


class CasPipe(Protocol):
    """Reads and compare-and-sets of many keys in flight at once; answers in completion order."""

    size: int  # requests in flight at most

    @property
    def queued(self) -> int:
        """Requests accepted but not sent yet (the caller stops feeding keys while this is large)."""
        ...

    def plan(self, keys: Sequence[Hashable]) -> list[Any]:
        """For each key the stored value to compute from (None: absent or guessed absent), or READ."""
        ...

    def read(self, tag: int, key: Hashable) -> None: ...

    def cas(self, tag: int, key: Hashable, expected: Any, value: Any) -> None: ...

    def answers(self) -> list[tuple[int, Answer]]:
        """The answers that arrived, waiting for some while requests are outstanding."""
        ...

    def close(self, failed: bool) -> None:
        """Stop; after a failure, requests not answered leave their keys' cached values unknown."""
        ...


@runtime_checkable
class PipelinedCas(Protocol):
    """A compare-and-set map that can run many keys' loops at once through one window."""

    def open_pipe(self) -> CasPipe | None:
        """A pipe for one ``cas_update`` call; None when this map cannot pipeline (e.g. a cache over SQLite)."""
        ...


def pipelined_cas_update(pipe: CasPipe, keys: Sequence[Hashable], computes: Sequence[Callable[[Any], Any]],
                         *, max_attempts: int = 8, metrics: StateMetrics = STATE_METRICS) -> list[Any]:
    """:func:`states.cas.cas_update` over distinct ``keys``, each key's steps sent as soon as it is ready.

    Keys are started (planned, then read or compare-and-set) while the pipe's queue is short, so
    a read key's compare-and-set and a conflict's retry join a window that is still full.
    """
    result: list[Any] = [None] * len(keys)
    attempts = [0] * len(keys)
    exhausted: list[int] = []
    left, started = len(keys), 0

    def step(i: int, stored: Any) -> bool:
        """Compute key ``i`` from ``stored``; compare-and-set it if it changed. True when the key is done."""
        nonlocal left
        result[i] = _compute(computes[i], stored, keys[i])
        if result[i] == stored:
            left -= 1
            return True
        if attempts[i] == max_attempts:
            exhausted.append(i)
            left -= 1
            return True
        attempts[i] += 1
        pipe.cas(i, keys[i], stored, result[i])
        return False

    try:
        while left:
            while started < len(keys) and pipe.queued < pipe.size:
                part = range(started, min(len(keys), started + pipe.size))
                for i, stored in zip(part, pipe.plan([keys[i] for i in part]), strict=True):
                    if stored is READ:
                        pipe.read(i, keys[i])
                    else:
                        step(i, stored)
                started = part.stop
            for i, answer in pipe.answers():
                if isinstance(answer, Stored):
                    step(i, answer.value)
                elif answer.applied:
                    left -= 1
                else:
                    metrics.cas_conflicts.inc()
                    step(i, answer.current)
    except BaseException:
        pipe.close(failed=True)
        raise
    pipe.close(failed=False)
    if exhausted:
        raise CasRetriesExhaustedError([keys[i] for i in sorted(exhausted)], max_attempts)
    return result


def _compute(compute: Callable[[Any], Any], stored: Any, key: object) -> Any:
    try:
        return compute(stored)
    except StaleBatchError as e:
        raise StaleBatchError(e.batch_txid, e.stored_txid, key) from None
