"""LRU caches between a map state and its backing map, one per kind of backing map.

A cache sits directly over storage, ``OpaqueMap(CasCachedMap(backing))``, so it caches *stored*
values (with their txids). A cached value may be stale when another writer (a zombie, a retried
task) wrote since:

* :class:`CasCachedMap` wraps a :class:`~states.protocols.CasBackingMap` and is one: a stale
  entry only costs a failed compare-and-set, which returns the current value and refreshes the
  cache. This is the cache for shared state (every backend of this project).
* :class:`CachedMap` wraps a plain :class:`~states.protocols.BackingMap` and has no
  compare-and-set, so writes through it are unconditional: use it only with a single writer.
  (Over a compare-and-set map it would hide ``multi_cas``: choose :class:`CasCachedMap` there.)

Entries can be exported and seeded (:meth:`CachedMap.entries`, ``entries=``), so a cache can
outlive the object holding it, e.g. one cache per Spark commit partition kept between tasks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from states.pipeline import READ, CasPipe, PipelinedCas, Stored
from states.protocols import BackingMap, CasBackingMap, CasResult

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CachedMap(Generic[K, V]):
    """LRU read-through, write-through cache of up to ``size`` stored values over a backing map."""

    def __init__(self, backing: BackingMap[K, V], size: int = 10_000,
                 entries: Iterable[tuple[K, V | None]] = ()) -> None:
        if size < 1:
            msg = "cache size must be >= 1"
            raise ValueError(msg)
        self.backing, self.size = backing, size
        self._lru: OrderedDict[K, V | None] = OrderedDict()
        self._remember(entries)

    def entries(self) -> list[tuple[K, V | None]]:
        """The cached ``(key, stored value or None for absent)`` pairs, least recently used first."""
        return list(self._lru.items())

    def multi_get(self, keys: Sequence[K]) -> list[V | None]:
        missing = [k for k in keys if k not in self._lru]
        loaded = dict(zip(missing, self.backing.multi_get(missing), strict=True)) if missing else {}
        found = [loaded[k] if k in loaded else self._lru[k] for k in keys]
        self._remember(loaded.items())
        for k in keys:
            if k in self._lru:
                self._lru.move_to_end(k)
        return found

    def multi_put(self, keys: Sequence[K], values: Sequence[V]) -> None:
        try:
            self.backing.multi_put(keys, values)
        except BaseException:
            self.invalidate(keys)  # some may have been written: the cache can't know which
            raise
        self._remember(zip(keys, values, strict=True))

    def invalidate(self, keys: Sequence[K] | None = None) -> None:
        """Forget ``keys`` (all keys when None)."""
        if keys is None:
            self._lru.clear()
        for k in keys or ():
            self._lru.pop(k, None)

    def _remember(self, items: Iterable[tuple[K, V | None]]) -> None:
        for k, v in items:
            self._lru[k] = v
            self._lru.move_to_end(k)
        while len(self._lru) > self.size:
            self._lru.popitem(last=False)


class CasCachedMap(CachedMap[K, V]):
    """The cache over a compare-and-set backing map, itself a compare-and-set map.

    A failed compare-and-set carries the value stored now, which replaces the stale entry.
    With ``blind_inserts`` a read for update (:func:`states.cas.cas_update`) guesses "absent" for
    keys it does not hold instead of reading them, while most misses are new keys: a new key then
    costs one LWT instead of a read and an LWT, and a wrong guess a failed LWT (which returns the
    row) instead of a read. What "most" is comes from evidence: a cache seeded with ``entries``
    starts from ``absent_rate`` (1.0 by default: it has seen every key of its range, so a miss is a
    new key; the estimate a saved cache had, when its entries are only the keys seen since a cold
    start); an empty one (a fresh process, maybe over existing rows) first reads a sample of
    ``sample`` misses and guesses only if most were absent. Then every read miss and every guess
    moves the estimate (:attr:`absent_rate`); None is no evidence yet.
    Through a pipe (:meth:`open_pipe`, over Cassandra) the same rules apply key by key as keys are
    started: an empty cache reads its misses until the first answers bring the evidence.
    """

    backing: CasBackingMap[K, V]

    def __init__(self, backing: CasBackingMap[K, V], size: int = 10_000,
                 entries: Iterable[tuple[K, V | None]] = (), *, blind_inserts: bool = True,
                 sample: int = 64, absent_rate: float | None = 1.0) -> None:
        if not isinstance(backing, CasBackingMap):
            msg = (
                f"CasCachedMap needs a compare-and-set backing map, not {type(backing).__name__} "
                f"(use CachedMap over a plain backing map)"
            )
            raise TypeError(msg)
        super().__init__(backing, size, entries)
        self.blind_inserts, self.sample = blind_inserts, sample
        # moving share of misses found absent; an empty cache has no evidence
        self.absent_rate: float | None = absent_rate if self._lru else None
        self._guessed: set[K] = set()

    def multi_get_for_update(self, keys: Sequence[K]) -> list[V | None]:
        """Cached values; misses are read, or guessed absent (None, unread) while guesses pay off."""
        self._guessed.clear()  # one read for update per compare-and-set loop (states.cas)
        missing = list(dict.fromkeys(k for k in keys if k not in self._lru))
        read: dict[K, V | None] = {}
        if missing and self.blind_inserts and self.absent_rate is None:  # no evidence yet: read a sample
            read.update(self._read(missing[:self.sample]))
            missing = missing[self.sample:]
        if missing and (not self.blind_inserts or (self.absent_rate or 0.0) <= 0.5):
            read.update(self._read(missing))
            missing = []
        self._guessed.update(missing)
        values: list[V | None] = []
        for k in keys:
            if k in read:
                values.append(read[k])
            elif k in self._lru:
                values.append(self._lru[k])
                self._lru.move_to_end(k)
            else:
                values.append(None)
        return values

    def _read(self, keys: list[K]) -> dict[K, V | None]:
        """``keys`` read from the backing map into the cache; the share found absent is evidence."""
        loaded = dict(zip(keys, self.backing.multi_get(keys), strict=True))
        self._remember(loaded.items())
        self._learn(sum(v is None for v in loaded.values()) / len(loaded))
        return loaded

    def multi_cas(self, keys: Sequence[K], expected: Sequence[V | None],
                  values: Sequence[V]) -> list[CasResult[V]]:
        try:
            results = self.backing.multi_cas(keys, expected, values)
        except BaseException:
            self.invalidate(keys)
            self._guessed.difference_update(keys)
            raise
        if self._guessed:
            guesses = [r.applied for k, r in zip(keys, results, strict=True) if k in self._guessed]
            self._guessed.difference_update(keys)
            if guesses:
                self._learn(sum(guesses) / len(guesses))
        self._remember((k, v if r.applied else r.current) for k, v, r in zip(keys, values, results, strict=True))
        return results

    def _learn(self, absent: float) -> None:
        self.absent_rate = absent if self.absent_rate is None else (self.absent_rate + absent) / 2

    def open_pipe(self) -> CasPipe | None:
        """The backing map's pipe through this cache (None when the backing map has none)."""
        inner = self.backing.open_pipe() if isinstance(self.backing, PipelinedCas) else None
        return None if inner is None else _CachePipe(self, inner)

    def forget_guesses(self) -> None:
        """A pipe starts or ends: the keys an earlier compare-and-set loop guessed absent are forgotten."""
        self._guessed.clear()

    def hear(self, heard: Sequence[tuple[K, Any, Stored | CasResult[Any]]]) -> None:
        """A pipe's answers, each with its key and the value written (or READ): the cache keeps what they say
        is stored, and they are evidence for guessing misses absent."""
        absent: list[bool] = []
        guesses: list[bool] = []
        for key, value, answer in heard:
            if isinstance(answer, Stored):
                absent.append(answer.value is None)
                self._remember([(key, answer.value)])
                continue
            if key in self._guessed:
                self._guessed.discard(key)
                guesses.append(answer.applied)
            self._remember([(key, value if answer.applied else answer.current)])
        for evidence in (absent, guesses):
            if evidence:
                self._learn(sum(evidence) / len(evidence))

    def plan(self, keys: Sequence[K]) -> list[V | None]:
        """For a pipe: cached values; misses guessed absent (None) while guesses pay off, else READ.

        Until there is evidence (an empty cache), misses are read: the first answers decide.
        """
        guess = self.blind_inserts and self.absent_rate is not None and self.absent_rate > 0.5
        out: list[V | None] = []
        for k in keys:
            if k in self._lru:
                out.append(self._lru[k])
                self._lru.move_to_end(k)
            elif guess:
                self._guessed.add(k)
                out.append(None)
            else:
                out.append(READ)
        return out


class _CachePipe:
    """A backing map's pipe whose answers refresh the cache and the evidence for guesses."""

    def __init__(self, cache: CasCachedMap[Any, Any], inner: CasPipe) -> None:
        self.cache, self.inner, self.size = cache, inner, inner.size
        self._keys: dict[int, tuple[Any, Any]] = {}  # tag -> (key, value being written or READ)
        cache.forget_guesses()

    @property
    def queued(self) -> int:
        return self.inner.queued

    def plan(self, keys: Sequence[Any]) -> list[Any]:
        return self.cache.plan(keys)

    def read(self, tag: int, key: Any) -> None:
        self._keys[tag] = (key, READ)
        self.inner.read(tag, key)

    def cas(self, tag: int, key: Any, expected: Any, value: Any) -> None:
        self._keys[tag] = (key, value)
        self.inner.cas(tag, key, expected, value)

    def answers(self) -> list[tuple[int, Stored | CasResult[Any]]]:
        answers = self.inner.answers()
        self.cache.hear([(*self._keys.pop(tag), answer) for tag, answer in answers])
        return answers

    def close(self, failed: bool) -> None:
        self.inner.close(failed)
        if failed:  # a compare-and-set without an answer may or may not have landed
            self.cache.invalidate([k for k, v in self._keys.values() if v is not READ])
        self.cache.forget_guesses()
