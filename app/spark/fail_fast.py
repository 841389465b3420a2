"""A process job stopped at its first failed task attempt, when the error-capturing form can take over.

Spark retries a failed task up to ``spark.task.maxFailures`` times (``local[N,F]``: F attempts), a
setting of the whole application, fixed when it starts: a transient failure (an executor lost, a
broker away) deserves the retries, but a record the transforms fail on fails every attempt alike, and
each attempt reads its ranges again. Spark tells a running job's failed attempts only as text (its
status store), and text decides nothing here: while a guarded job group runs, :func:`stop_at_first_failure`
watches its tasks (Spark's status tracker, every :data:`POLL` seconds) and cancels the group at the
first failed attempt, whatever the error; the block then raises :class:`StoppedAtFirstFailure`. The
caller runs the txid in the error-capturing form (:mod:`app.spark.capture`), which tells record errors
by data: failing rows are bad records, and a run where none fails gives the txid's results (the failure
was not a record's). Best effort: a task whose attempts all fail before the watcher looks is retried as
before. Nothing is written by a process job.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JError

POLL = 0.05  # seconds between two looks at the group's tasks


class StoppedAtFirstFailure(Exception):
    """A process job cancelled at its first failed task attempt (the capturing form tells what failed)."""


class Watch:
    """What the watcher of one guarded block did: whether it cancelled the block's jobs."""

    def __init__(self) -> None:
        self.cancelled = False


@contextmanager
def stop_at_first_failure(spark: Any, group: str, enabled: bool = True) -> Iterator[Watch]:
    """Run the block with job group ``group``'s jobs (those started within it) cancelled at their first failed
    task attempt; the block's error is then :class:`StoppedAtFirstFailure`. ``enabled`` False: unwatched."""
    watch = Watch()
    if not enabled:
        yield watch
        return
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    earlier = frozenset(tracker.getJobIdsForGroup(group))
    stop = threading.Event()

    def look() -> None:
        while not stop.wait(POLL):
            try:
                failed = _has_failed_attempt(tracker, group, earlier)
            except Py4JError:
                return  # the context is stopping: the job fails or ends by itself
            if failed:
                watch.cancelled = True
                sc.cancelJobGroup(group)
                return

    thread = threading.Thread(target=look, name=f"first failure of {group}", daemon=True)
    thread.start()
    try:
        yield watch
    except Exception as e:
        if watch.cancelled:
            raise StoppedAtFirstFailure(f"job group {group} cancelled at its first failed task attempt") from e
        raise
    finally:
        stop.set()
        thread.join()


def _has_failed_attempt(tracker: Any, group: str, earlier: frozenset[int]) -> bool:
    """Whether a job of ``group`` (not ``earlier``) has a failed task attempt."""
    for job in tracker.getJobIdsForGroup(group):
        info = None if job in earlier else tracker.getJobInfo(job)
        if info is None:
            continue
        for stage in info.stageIds:
            s = tracker.getStageInfo(stage)
            if s is not None and s.numFailedTasks:
                return True
    return False
