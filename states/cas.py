"""The read / compute / compare-and-set loop every map state writes through."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import BackingMap, CasBackingMap

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

    1. **Read** the stored values in one ``multi_get``.
    2. **Compute** the new stored values (a batch behind the state raises StaleBatchError, naming the key).
    3. **Compare-and-set** only what changed, each write conditioned on the value read in step 1.
    4. **Recompute** every key whose compare-and-set failed, from the current value the failure
       returned (no extra read), and go back to step 3; after ``max_attempts`` rounds raise
       CasRetriesExhaustedError.

    Over a plain backing map (no ``multi_cas``) step 3 is one unconditional ``multi_put`` and there
    is no step 4: correct only with a single writer. Returns the new stored value of every key.
    """
    stored = backing.multi_get(keys)  # step 1
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
