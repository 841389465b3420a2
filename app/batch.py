"""A batch in flight: its txid, attempt, plan, and a guarded lifecycle."""

from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from spouts.metadata import BatchPlan


class BatchStatus(enum.Enum):
    PLANNED = "planned"
    PROCESSED = "processed"
    COMMITTED = "committed"
    FAILED = "failed"


_NEXT = {
    BatchStatus.PLANNED: {BatchStatus.PROCESSED, BatchStatus.FAILED},
    BatchStatus.PROCESSED: {BatchStatus.COMMITTED, BatchStatus.FAILED},
    BatchStatus.COMMITTED: set(),
    BatchStatus.FAILED: set(),
}


class BatchLifecycleError(RuntimeError):
    """A batch was moved to a status it cannot reach (a failed attempt reused, a commit repeated)."""


@dataclass(frozen=True, slots=True)
class CommitStats:
    """What committing a batch did, summed over executor tasks."""

    records: int = 0
    keys_updated: int = 0


@dataclass(eq=False)
class Batch:
    """One attempt at one txid. ``frozen`` once its plan is in the store: every replay reuses it."""

    txid: int
    attempt: int
    plan: BatchPlan
    frozen: bool
    status: BatchStatus = BatchStatus.PLANNED
    result: Any = None
    future: Future[Any] | None = field(default=None, repr=False)

    def advance(self, to: BatchStatus) -> None:
        if to not in _NEXT[self.status]:
            raise BatchLifecycleError(f"txid {self.txid} attempt {self.attempt}: {self.status.value} -> {to.value}")
        self.status = to


class BatchExecutor(Protocol):
    """Runs a batch's work: ``process`` reads, transforms and pre-aggregates without touching state;
    ``commit`` applies the result through the states. Both must be deterministic in the plan."""

    def state_kinds(self) -> list[Any]: ...

    def process(self, batch: Batch) -> Any: ...

    def commit(self, batch: Batch, processed: Any) -> CommitStats: ...

    # Optional: ``cancel(txid)`` stops the still-running work of an abandoned txid.
