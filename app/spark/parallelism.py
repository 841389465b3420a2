"""How many read and commit tasks a txid gets, and Spark's shuffle partitions: they follow the executors.

On a local master the executors are the driver's threads and never change. On a cluster executors
register after the session starts, die and come back: the counts are chosen again from what runs
now (:func:`observe`, two cheap calls into the driver's JVM) before every txid's process step,
not once at start-up. ``spark.sql.shuffle.partitions`` left unset would be Spark's 200 (a txid of
200 shuffle tasks and one more repartition to the commit tasks): it is set to the commit tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.spark.jvm import java_context
from app.spark.session import local_cores

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


@dataclass(frozen=True, slots=True)
class ExecutorCounts:
    """What the driver sees of its executors now: the tasks they run at once (a local master's threads,
    a cluster's default parallelism: its executors' cores), Spark's default parallelism (the same
    unless ``spark.default.parallelism`` is set), and how many executors are registered (a local
    master's threads count as one)."""

    cores: int
    default_parallelism: int
    executors: int


@dataclass(frozen=True, slots=True)
class Parallelism:
    """The counts a txid is processed and committed with. ``shuffle_partitions`` None: the user's own
    ``spark.sql.shuffle.partitions`` is kept."""

    read_tasks: int
    commit_partitions: int
    shuffle_partitions: int | None

    def describe(self) -> str:
        shuffle = (f"{self.shuffle_partitions} shuffle partitions (set from the executors' cores)"
                   if self.shuffle_partitions is not None else "spark.sql.shuffle.partitions as configured")
        return f"{self.read_tasks} read tasks, {self.commit_partitions} commit tasks per keyed sink, {shuffle}"


def observe(spark: Any) -> ExecutorCounts:
    """The executors' cores and count as the driver sees them now."""
    sc = spark.sparkContext
    threads = local_cores(sc.master)
    default = max(1, int(sc.defaultParallelism))
    if threads is not None:
        return ExecutorCounts(threads, default, 1)
    executors = java_context(spark).getExecutorIds().size()  # registered executors (the driver is not one)
    return ExecutorCounts(default, default, int(executors))


def user_shuffle_partitions(spark: Any) -> bool:
    """Whether ``spark.sql.shuffle.partitions`` was given when the session was built (by the config's
    ``spark.conf``, or for a local master by :func:`app.spark.session.default_conf`)."""
    return bool(spark.sparkContext.getConf().contains(SHUFFLE_PARTITIONS))


def choose(seen: ExecutorCounts, previous: Parallelism | None, *, read_tasks: int | None = None,
           commit_partitions: int | None = None, keep_shuffle: bool = False) -> Parallelism:
    """The counts for the next txid.

    Reads: one task per executor core; commits: Spark's default parallelism (one per core, unless
    ``spark.default.parallelism`` says otherwise); shuffle partitions: the commit tasks, so the
    aggregate lands in its commit partitions without another repartition. Counts given explicitly
    (``read_tasks``, ``commit_partitions``, ``keep_shuffle``) are kept. With no executor registered
    (all lost, or not yet up) the previous counts are kept: the next txid waits for executors anyway,
    and counts sized for nothing would only move every key to another commit partition and back.
    """
    if seen.executors == 0 and previous is not None:
        return previous
    commits = commit_partitions or max(1, seen.default_parallelism)
    return Parallelism(read_tasks or max(1, seen.cores), commits, None if keep_shuffle else commits)
