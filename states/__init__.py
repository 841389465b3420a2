"""Trident-style state: how a batch's aggregates reach storage exactly once.

Every batch has a ``txid`` that is the same on every replay, and state updates are strongly
ordered: txid N is committed only after N-1. On top of that guarantee there are three kinds of
state, differing in what they store next to each value:

* **Transactional** (:class:`TransactionalMap`) stores ``(txid, value)``. If the stored txid equals
  the batch's, the batch was already applied and is skipped. Correct only when a txid always
  carries exactly the same records (a *transactional* spout).
* **Opaque transactional** (:class:`OpaqueMap`) stores ``(txid, curr, prev)``. A replay of txid N
  recomputes from ``prev``, so it is correct even when a replayed batch carries different records
  (an *opaque* spout: a partition may be unreadable on one attempt and readable on the next).
* **Non-transactional** (:class:`NonTransactionalMap`) stores just the value: every replay is
  applied again, so it is at-least-once.

Storage is a :class:`BackingMap` of two methods (plus an optional compare-and-set method); the
kinds above wrap any backing map, and so do caches: ``OpaqueMap(CasCachedMap(CassandraBackingMap()))``
(:class:`CasCachedMap` over a compare-and-set map, :class:`CachedMap` over a plain one).
The rules themselves live in the value objects :class:`OpaqueValue` and :class:`TransactionalValue`.
"""

from states.aggregators import CombinerAggregator, Count, First, Latest, Max, Min, Sum, combiner
from states.cached import CachedMap, CasCachedMap
from states.errors import (
    CasRetriesExhaustedError,
    LeaseHeldError,
    LeaseLostError,
    StaleBatchError,
    StateError,
    UnknownOutcomeError,
)
from states.non_transactional import NonTransactionalMap
from states.opaque import OpaqueMap
from states.protocols import (
    BackingMap,
    CasBackingMap,
    CasResult,
    CoordinatorStore,
    LeaseInfo,
    MapState,
    Snapshottable,
    State,
    TransactionalStateStore,
)
from states.rotating import RotatingTransactionalState
from states.snapshottable import SnapshottableMap
from states.stamped import Stamped
from states.transactional import TransactionalMap
from states.values import OpaqueValue, TransactionalValue

__all__ = [
    "BackingMap",
    "CachedMap",
    "CasBackingMap",
    "CasCachedMap",
    "CasResult",
    "CasRetriesExhaustedError",
    "CombinerAggregator",
    "CoordinatorStore",
    "Count",
    "First",
    "Latest",
    "LeaseHeldError",
    "LeaseInfo",
    "LeaseLostError",
    "MapState",
    "Max",
    "Min",
    "NonTransactionalMap",
    "OpaqueMap",
    "OpaqueValue",
    "RotatingTransactionalState",
    "Snapshottable",
    "SnapshottableMap",
    "StaleBatchError",
    "Stamped",
    "State",
    "StateError",
    "Sum",
    "TransactionalMap",
    "TransactionalStateStore",
    "TransactionalValue",
    "UnknownOutcomeError",
    "combiner",
]
