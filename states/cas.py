"""The read / compute / compare-and-set loop every map state writes through."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.pipeline import PipelinedCas, pipelined_cas_update
from states.protocols import BackingMap, CasBackingMap

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")  # a stored value: OpaqueValue, TransactionalValue or a plain value


@runtime_checkable
class GuessingReads(Protocol):
    """A compare-and-set map that may answer a read for update with a guess instead of a request."""

    def multi_get_for_update(self, keys: Sequence[K]) -> list[S | None]:
        """The stored values to compute from; None for absent keys and for keys guessed absent, unread."""
        ...


def cas_update(
    backing: BackingMap[K, S],
    keys: Sequence[K],
    computes: Sequence[Callable[[S | None], S]],
    *,
    max_attempts: int = 8,
    metrics: StateMetrics = STATE_METRICS,
) -> list[S]:
    """Read ``keys``, compute each new stored value, and compare-and-set the ones that changed.

    1. **Read** the stored values in one ``multi_get``. A :class:`GuessingReads` map (the cache) may
       instead guess "absent" for keys it does not hold: a new key then costs one
       ``INSERT ... IF NOT EXISTS`` and no read, an existing one a failed compare-and-set, which
       returns the stored value (step 4), as a read would have (and counts as a conflict).
    2. **Compute** the new stored values (a batch behind the state raises StaleBatchError, naming the key).
    3. **Compare-and-set** only what changed, each write conditioned on the value read in step 1.
    4. **Recompute** every key whose compare-and-set failed, from the current value the failure
       returned (no extra read), and go back to step 3; after ``max_attempts`` rounds raise
       CasRetriesExhaustedError.

    Over a plain backing map (no ``multi_cas``) step 3 is one unconditional ``multi_put`` and there
    is no step 4: correct only with a single writer. Returns the new stored value of every key.

    A :class:`~states.pipeline.PipelinedCas` map (Cassandra) runs the same steps key by key
    through one window of requests (:func:`~states.pipeline.pipelined_cas_update`) when ``keys``
    are distinct: no step waits for every key to finish the one before.
    """
    pipe = backing.open_pipe() if isinstance(backing, PipelinedCas) and len(set(keys)) == len(keys) else None
    if pipe is not None:
        return pipelined_cas_update(pipe, keys, computes, max_attempts=max_attempts, metrics=metrics)
    stored: list[S | None]
    if isinstance(backing, GuessingReads):  # step 1
        stored = backing.multi_get_for_update(keys)
    else:
        stored = backing.multi_get(keys)
    result = [_compute(c, s, k) for c, s, k in zip(computes, stored, keys, strict=True)]  # step 2
    pending = [i for i, (s, n) in enumerate(zip(stored, result, strict=True)) if n != s]
    if not isinstance(backing, CasBackingMap):  # step 3, plain backing map
        if pending:
            backing.multi_put([keys[i] for i in pending], [result[i] for i in pending])
        return result
    expected = {i: stored[i] for i in pending}
    for _attempt in range(max_attempts):  # step 3, compare-and-set
        if not pending:
            return result
        outcomes = backing.multi_cas(
            [keys[i] for i in pending], [expected[i] for i in pending], [result[i] for i in pending]
        )
        retry = []
        for i, outcome in zip(pending, outcomes, strict=True):  # step 4
            if outcome.applied:
                continue
            metrics.cas_conflicts.inc()
            result[i] = _compute(computes[i], outcome.current, keys[i])
            if result[i] != outcome.current:
                expected[i] = outcome.current
                retry.append(i)
        pending = retry
    if pending:
        raise CasRetriesExhaustedError([keys[i] for i in pending], max_attempts)
    return result


def _compute(compute: Callable[[S | None], S], stored: S | None, key: object) -> S:
    try:
        return compute(stored)
    except StaleBatchError as e:
        raise StaleBatchError(e.batch_txid, e.stored_txid, key) from None
