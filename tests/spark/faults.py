"""Fault switches that Spark executors see: picklable hooks for ``SparkExecutor(faults=...)``.

A hook runs inside executor tasks (``app.spark.tasks``); it leaves a marker file for every fault it
fires, so a test can prove the fault happened in a worker process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class InjectedTaskFailureError(RuntimeError):
    """A task failure a test asked for."""


@dataclass(frozen=True)
class FailTask:
    """Fails the task for Spark partition ``partition`` at ``point`` of ``txid``.

    ``every_attempt`` False: only Spark's first attempt of the task fails (Spark retries it).
    True: every attempt fails, so the job fails, but only on batch attempt ``batch_attempt``
    (the coordinator's replay of the txid then succeeds).
    """

    point: str
    txid: int
    markers: str
    partition: int = 0
    every_attempt: bool = False
    batch_attempt: int = 1

    def __call__(self, point: str, txid: int, attempt: int) -> None:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if (point, txid, attempt) != (self.point, self.txid, self.batch_attempt) or ctx is None:
            return
        if ctx.partitionId() != self.partition or (ctx.attemptNumber() > 0 and not self.every_attempt):
            return
        Path(self.markers, f"{point}-txid{txid}-batch{attempt}-task{ctx.attemptNumber()}").touch()
        raise InjectedTaskFailureError(f"injected {point} failure: txid {txid}, task attempt {ctx.attemptNumber()}")


@dataclass(frozen=True)
class FailOnDriver:
    """Fails ``point`` of ``txid`` where it runs on the driver (no Spark task: a driver-side commit), on batch
    attempt ``batch_attempt`` only, so the coordinator's replay succeeds."""

    point: str
    txid: int
    markers: str
    batch_attempt: int = 1

    def __call__(self, point: str, txid: int, attempt: int) -> None:
        from pyspark import TaskContext

        if (point, txid, attempt) != (self.point, self.txid, self.batch_attempt) or TaskContext.get() is not None:
            return
        Path(self.markers, f"{point}-txid{txid}-batch{attempt}-driver").touch()
        msg = f"injected {point} failure on the driver: txid {txid}"
        raise InjectedTaskFailureError(msg)


@dataclass(frozen=True)
class WhereCommitted:
    """Leaves a marker for every commit of a keyed result: ``commit-txid<N>-driver``, or ``-task<partition>``."""

    markers: str

    def __call__(self, point: str, txid: int, attempt: int) -> None:
        from pyspark import TaskContext

        if point != "commit":
            return
        ctx = TaskContext.get()
        Path(self.markers, f"commit-txid{txid}-" + ("driver" if ctx is None else f"task{ctx.partitionId()}")).touch()


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir())


@dataclass(frozen=True)
class Reworded:
    """Raises a StaleBatchError with its message replaced at a commit of ``txid``: only its fields are real."""

    txid: int
    message: str = "a reworded message that names no txid"

    def __call__(self, point: str, txid: int, attempt: int) -> None:
        from states.errors import StaleBatchError

        if (point, txid) == ("commit", self.txid):
            error = StaleBatchError(txid, txid + 5, ("fox",))
            error.args = (self.message,)
            raise error
