"""One conditional write sent until it is decided: the coordinator store's unknown-outcome rule, written once.

Every attempt sends the lightweight transaction. An **answer** decides it: ``answered`` turns the
row (``[applied]`` and, when not applied, the current values) into the result, raises (a fenced
write: :class:`~states.errors.LeaseLostError`), or asks for another attempt (:data:`AGAIN`, a race
lost to another writer). A **transient failure** leaves the outcome unknown (:func:`states.cassandra.retry.decide`
says ``RESOLVE``): it is never taken as applied or as not applied; ``resolve`` decides it, from a
serial read (:mod:`states.cassandra.unknown`) or because sending the same write again is harmless,
and returns the result (it landed), :data:`AGAIN` (send it again) or raises. Any other failure is
raised. After ``attempts`` attempts without a decision, :class:`LwtUndecidedError` says which write,
how often and the last failure: the caller is told, never left to guess.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from states.cassandra.retry import Decision, decide
from states.errors import StateError

T = TypeVar("T")
Row = Any  # a result row of the driver (a dict: the session's row factory)


class Again(enum.Enum):
    """The write is not decided yet: send it again (after the caller's backoff)."""

    AGAIN = "again"


AGAIN: Literal[Again.AGAIN] = Again.AGAIN


class LwtUndecidedError(StateError):
    """A conditional write of ``what`` stayed undecided after ``attempts`` attempts: each outcome was unknown
    (``last`` is the last failure) or each race was lost to another writer (``last`` is None)."""

    def __init__(self, what: str, attempts: int, last: BaseException | None) -> None:
        self.what, self.attempts, self.last = what, attempts, last
        why = f"outcome unknown, last {type(last).__name__}: {last}" if last is not None else "every race lost"
        super().__init__(f"{what}: undecided after {attempts} attempts ({why})")


def settle(what: str, send: Callable[[], Row], answered: Callable[[Row], T | Again],
           resolve: Callable[[], T | Again], *, attempts: int, pause: Callable[[int], None],
           prepare: Callable[[], None] | None = None) -> T:
    """Send the write (``send`` returns the answer's row, or raises the driver's error) until ``answered`` or
    ``resolve`` decides it; ``pause(n)`` runs before retry number ``n`` (0-based). ``prepare`` runs before each
    send, outside the rule: what it raises (a read that decides what to write) is raised as it is."""
    last: BaseException | None = None
    for attempt in range(attempts):
        if attempt:
            pause(attempt - 1)
        if prepare is not None:
            prepare()
        try:
            row = send()
        except Exception as e:
            if decide(e, lwt=True) is not Decision.RESOLVE:
                raise
            last, outcome = e, resolve()
        else:
            outcome = answered(row)
        if not isinstance(outcome, Again):
            return outcome
    raise LwtUndecidedError(what, attempts, last)
