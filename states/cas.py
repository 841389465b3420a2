"""The read / compute / compare-and-set loop every map state writes through, the only copy of it.

Each key goes read -> compute -> compare-and-set -> (on conflict) recompute from the value the
failed compare-and-set returned -> compare-and-set ... The requests go through a
:class:`~states.pipeline.CasPipe`: a map that pipelines (Cassandra) opens one with a bounded window,
where each key moves on as soon as its own answer arrives; any other map runs through a
:class:`~states.pipeline.BatchPipe`, whose window is unbounded, so every step is one batched call
(one ``multi_get``, then one ``multi_cas`` per round of conflicts). Same loop, same rules; only the
window differs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.pipeline import READ, BatchPipe, CasPipe, GuessingReads, PipelinedCas, Stored
from states.protocols import BackingMap

__all__ = ["GuessingReads", "cas_update"]

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")  # a stored value: OpaqueValue, TransactionalValue or a plain value


def cas_update(
    backing: BackingMap[K, S],
    keys: Sequence[K],
    computes: Sequence[Callable[[S | None], S]],
    *,
    max_attempts: int = 8,
    metrics: StateMetrics = STATE_METRICS,
) -> list[S]:
    """Read ``keys``, compute each new stored value, and compare-and-set the ones that changed.

    1. **Read** the stored value. A :class:`GuessingReads` map (the cache) may instead guess
       "absent" for keys it does not hold: a new key then costs one ``INSERT ... IF NOT EXISTS`` and
       no read, an existing one a failed compare-and-set, which returns the stored value (step 4), as
       a read would have (and counts as a conflict).
    2. **Compute** the new stored value (a batch behind the state raises StaleBatchError, naming the key).
    3. **Compare-and-set** it only if it changed, conditioned on the value it was computed from.
    4. **Recompute** a key whose compare-and-set failed from the current value the failure returned
       (no extra read), and go back to step 3; after ``max_attempts`` compare-and-sets of one key
       raise CasRetriesExhaustedError naming every such key.

    Over a plain backing map (no ``multi_cas``) step 3 is an unconditional ``multi_put`` and never
    fails: correct only with a single writer. Returns the new stored value of every key.
    A :class:`~states.pipeline.PipelinedCas` map's pipe is used when ``keys`` are distinct.
    """
    pipe = backing.open_pipe() if isinstance(backing, PipelinedCas) and len(set(keys)) == len(keys) else None
    return _run(pipe or BatchPipe(backing), keys, computes, max_attempts, metrics)


def _run(pipe: CasPipe, keys: Sequence[Any], computes: Sequence[Callable[[Any], Any]], max_attempts: int,
         metrics: StateMetrics) -> list[Any]:
    """The loop, each key's next step sent as soon as it is ready.

    Keys are started (planned, then read or compare-and-set) while the pipe's queue is short, so
    a read key's compare-and-set and a conflict's retry join a window that is still full.
    """
    run = _Run(pipe, keys, computes, max_attempts)
    try:
        while run.left:
            run.start()
            for i, answer in pipe.answers():
                if isinstance(answer, Stored):
                    run.step(i, answer.value)
                elif answer.applied:
                    run.left -= 1
                else:
                    metrics.cas_conflicts.inc()
                    run.step(i, answer.current)
    except BaseException:
        pipe.close(failed=True)
        raise
    pipe.close(failed=False)
    if run.exhausted:
        raise CasRetriesExhaustedError([keys[i] for i in sorted(run.exhausted)], max_attempts)
    return run.result


class _Run:
    """One run of the loop: each key's result and attempts, the keys out of attempts, how many are left."""

    __slots__ = ("attempts", "computes", "exhausted", "keys", "left", "max_attempts", "pipe", "result", "started")

    def __init__(self, pipe: CasPipe, keys: Sequence[Any], computes: Sequence[Callable[[Any], Any]],
                 max_attempts: int) -> None:
        self.pipe, self.keys, self.computes, self.max_attempts = pipe, keys, computes, max_attempts
        self.result: list[Any] = [None] * len(keys)
        self.attempts = [0] * len(keys)
        self.exhausted: list[int] = []
        self.left, self.started = len(keys), 0

    def start(self) -> None:
        """Start keys (planned, then read or compare-and-set) while the pipe's queue is short."""
        pipe, keys = self.pipe, self.keys
        while self.started < len(keys) and pipe.queued < pipe.size:
            part = range(self.started, min(len(keys), self.started + pipe.size))
            for i, stored in zip(part, pipe.plan([keys[i] for i in part]), strict=True):
                if stored is READ:
                    pipe.read(i, keys[i])
                else:
                    self.step(i, stored)
            self.started = part.stop

    def step(self, i: int, stored: Any) -> None:
        """Compute key ``i`` from ``stored``; compare-and-set it if it changed, else it is done."""
        self.result[i] = _compute(self.computes[i], stored, self.keys[i])
        if self.result[i] == stored:
            self.left -= 1
        elif self.attempts[i] == self.max_attempts:
            self.exhausted.append(i)
            self.left -= 1
        else:
            self.attempts[i] += 1
            self.pipe.cas(i, self.keys[i], stored, self.result[i])


def _compute(compute: Callable[[Any], Any], stored: Any, key: object) -> Any:
    try:
        return compute(stored)
    except StaleBatchError as e:
        raise StaleBatchError(e.batch_txid, e.stored_txid, key) from None
