"""The read-compute-write loop every map state shares: compare-and-set when the backing map can."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import STATE_METRICS, StateMetrics
from states.protocols import BackingMap, CasBackingMap

Compute = Callable[[Any], Any]  # stored value (or None) -> new stored value


def write_through(
    backing: BackingMap[Any, Any],
    keys: Sequence[Any],
    computes: Sequence[Compute],
    *,
    max_attempts: int = 8,
    metrics: StateMetrics = STATE_METRICS,
) -> list[Any]:
    """Read ``keys``, compute each new stored value, and write the ones that changed.

    1. Read the stored values in one ``multi_get``.
    2. Compute the new stored values (a batch behind the state raises StaleBatchError).
    3. Write only what changed. With a CAS backing map every write is conditioned on the value
       read; a failed CAS recomputes from the current value it returned (no extra read), up to
       ``max_attempts`` rounds, then CasRetriesExhaustedError.
    Returns the new stored value of every key.
    """
    stored = backing.multi_get(keys)  # step 1
    result = [_compute(c, s, k) for c, s, k in zip(computes, stored, keys, strict=True)]  # step 2
    pending = [i for i, (s, n) in enumerate(zip(stored, result)) if n != s]
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
        for i, outcome in zip(pending, outcomes, strict=True):
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


def _compute(compute: Compute, stored: Any, key: Any) -> Any:
    try:
        return compute(stored)
    except StaleBatchError as e:
        raise StaleBatchError(e.batch_txid, e.stored_txid, key) from None
