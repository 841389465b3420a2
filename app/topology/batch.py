"""A batch in flight: its txid, attempt, plan, and a guarded lifecycle."""

from __future__ import annotations

import enum
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from spouts.metadata import BatchPlan
from states.spec import StateKind

if TYPE_CHECKING:
    from app.topology.topology import Topology
    from spouts.bad_records import BadRecord


class BatchStatus(enum.Enum):
    """Where one attempt at a txid stands; :data:`_NEXT` says which moves are allowed."""

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
    progress: Any = field(default=None, repr=False)  # the coordinator's ProgressLog: isolated bad records live there

    def advance(self, to: BatchStatus) -> None:
        """Move to ``to``, or raise BatchLifecycleError when the lifecycle does not allow it."""
        if to not in _NEXT[self.status]:
            msg = f"txid {self.txid} attempt {self.attempt}: {self.status.value} -> {to.value}"
            raise BatchLifecycleError(msg)
        self.status = to


class BatchExecutor(Protocol):
    """Runs a batch's work: ``process`` reads, transforms and pre-aggregates without touching state;
    ``commit`` applies the result through the states. Both must be deterministic in the plan."""

    def state_kinds(self) -> list[StateKind]:
        """The kind of every state the executor writes (checked against the spout's kind)."""
        ...

    def process(self, batch: Batch) -> Any: ...

    def commit(self, batch: Batch, processed: Any) -> CommitStats: ...

    def cancel(self, txid: int) -> None:
        """Stop the still-running work of an abandoned txid (a no-op where nothing can be cancelled)."""
        ...

    def close(self) -> None:
        """Release what is held for txids not committed (the coordinator is stopping)."""
        ...


@runtime_checkable
class ChecksState(Protocol):
    """An executor that checks, before a pipeline's first txid, that the states it writes are all there."""

    def check_state(self, committed_txid: int, progress: Any) -> None:
        """Raise a permanent state error (a table gone though ``committed_txid`` was committed into it);
        ``progress``: the coordinator's ProgressLog (None: no rewind to ask about)."""
        ...


@runtime_checkable
class RunsTopology(Protocol):
    """An executor built from a topology: the topology's error policy says what its bad records do."""

    @property
    def topology(self) -> Topology: ...


@runtime_checkable
class FindsBadRecords(Protocol):
    """A processed result that left records out as bad (the error policy settles them before the commit)."""

    @property
    def bad_records(self) -> tuple[BadRecord, ...]: ...


@runtime_checkable
class Reports(Protocol):
    """A part of the pipeline that can say what holds it up, in a line (None: nothing): a spout's coordinator
    side (a missing topic) or an executor (bad records being isolated, no Spark executor)."""

    @property
    def problem(self) -> str | None: ...


def first_problem(*parts: object) -> str | None:
    """The first problem one of ``parts`` reports (:class:`Reports`), if any."""
    for part in parts:
        if isinstance(part, Reports) and isinstance(part.problem, str):
            return part.problem
    return None


@runtime_checkable
class WarmsUp(Protocol):
    """An executor that can pay a cold first txid's costs ahead, while its instance waits as a standby."""

    def warm_up(self, plan: BatchPlan) -> object:
        """Run ``plan``'s work once without writing anything (reads and state sessions get warm)."""
        ...
