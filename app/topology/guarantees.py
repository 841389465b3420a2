"""Which spout x state combinations give exactly-once, and refusing the ones that don't."""

from __future__ import annotations

import enum

from spouts.protocols import SpoutKind
from states.spec import StateKind


class Guarantee(enum.Enum):
    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"


class CombinationError(ValueError):
    """A spout and a state that together cannot give the guarantee the pipeline asks for."""


def check_combination(spout: SpoutKind, state: StateKind, *, accept_at_least_once: bool = False) -> Guarantee:
    """The guarantee of ``spout`` feeding ``state``, or CombinationError with what to change.

    Opaque spout needs opaque state; a transactional spout works with transactional or opaque
    state; a non-transactional state is at-least-once and needs ``accept_at_least_once``.
    """
    if state is StateKind.NON_TRANSACTIONAL:
        if accept_at_least_once:
            return Guarantee.AT_LEAST_ONCE
        msg = (
            f"a non-transactional state counts replayed batches again (at-least-once) with a {spout.value} spout; "
            "use state kind 'opaque' for exactly-once, or set accept_at_least_once: true"
        )
        raise CombinationError(msg)
    if spout is SpoutKind.OPAQUE and state is StateKind.TRANSACTIONAL:
        msg = (
            "an opaque spout may replay a txid with different records, which a transactional state would "
            "skip or miscount; use state kind 'opaque' (or a transactional spout)"
        )
        raise CombinationError(msg)
    return Guarantee.EXACTLY_ONCE
