"""Pipes: how the compare-and-set loop of :mod:`states.cas` sends its reads and compare-and-sets.

Over a map whose requests go over the network (Cassandra), batched steps (read every key, then
compare-and-set every key, then retry the failures) leave the server idle at each step's end. A
:class:`PipelinedCas` map instead opens a :class:`CasPipe` with a bounded window: reads and
compare-and-sets of different keys share the requests in flight, and each key moves on as soon as
its own answer arrives. Every other map goes through a :class:`BatchPipe`, the same protocol with
an unbounded window: each round of requests is one batched call.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from states.protocols import BackingMap, CasBackingMap, CasResult


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


@runtime_checkable
class GuessingReads(Protocol):
    """A compare-and-set map that may answer a read for update with a guess instead of a request."""

    def multi_get_for_update(self, keys: Sequence[Any]) -> list[Any]:
        """The stored values to compute from; None for absent keys and for keys guessed absent, unread."""
        ...


class BatchPipe:
    """The pipe of a map that does not pipeline: an unbounded window, each round one batched call.

    ``plan`` reads every key in one ``multi_get`` (``multi_get_for_update`` for a
    :class:`GuessingReads` map); the compare-and-sets queued since go out together in one
    ``multi_cas`` when the answers are asked for (one unconditional ``multi_put`` over a map
    without compare-and-set, whose writes always apply).
    """

    size = sys.maxsize

    def __init__(self, backing: BackingMap[Any, Any]) -> None:
        self.backing = backing
        self._cas: list[tuple[int, Any, Any, Any]] = []  # (tag, key, expected, value)

    @property
    def queued(self) -> int:
        return len(self._cas)

    def plan(self, keys: Sequence[Hashable]) -> list[Any]:
        if isinstance(self.backing, GuessingReads):
            return self.backing.multi_get_for_update(keys)
        return self.backing.multi_get(keys)

    def read(self, tag: int, key: Hashable) -> None:
        msg = "a batch pipe reads every key when planning"
        raise AssertionError(msg)

    def cas(self, tag: int, key: Hashable, expected: Any, value: Any) -> None:
        self._cas.append((tag, key, expected, value))

    def answers(self) -> list[tuple[int, Answer]]:
        batch, self._cas = self._cas, []
        if not batch:
            return []
        tags, keys, expected, values = (list(c) for c in zip(*batch, strict=True))
        if isinstance(self.backing, CasBackingMap):
            return list(zip(tags, self.backing.multi_cas(keys, expected, values), strict=True))
        self.backing.multi_put(keys, values)
        return [(tag, CasResult(True)) for tag in tags]

    def close(self, failed: bool) -> None:
        self._cas = []
