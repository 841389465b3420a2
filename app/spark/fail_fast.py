"""A job stopped at its first task that fails on a record: a deterministic error is not worth
``spark.task.maxFailures`` attempts.

Spark retries a failed task up to ``spark.task.maxFailures`` times (``local[N,F]``: F attempts), a
setting of the whole application, fixed when it starts: a transient failure (an executor lost, a
broker away) deserves the retries, but a record the transforms fail on fails every attempt alike, and
each attempt reads its ranges again. While a job group's jobs run, :func:`stop_at_record_error` watches
their tasks (Spark's status tracker, every :data:`POLL` seconds); at the first failed attempt whose
error is a record error (:func:`app.spark.bad_records.record_error`) it cancels the group, so the job
raises at once, as :class:`RecordFailure` with the task's error. Any other failure keeps its retries.
Best effort: a task whose attempts all fail before the watcher looks is retried as before; either way
the job fails, and nothing is written by a process job or a probe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from py4j.protocol import Py4JError

from app.spark.bad_records import record_error
from app.spark.jvm import failed_task_errors

POLL = 0.05  # seconds between two looks at the group's tasks


class RecordFailure(Exception):
    """A job cancelled at a task that failed on a record; the text is the task's error (first lines)."""


class Watch:
    """What the watcher of one guarded block saw: the record error it cancelled the jobs for, if any."""

    def __init__(self) -> None:
        self.error: RecordFailure | None = None


@contextmanager
def stop_at_record_error(spark: Any, group: str, enabled: bool = True) -> Iterator[Watch]:
    """Run the block with job group ``group``'s jobs (those started within it) cancelled at their first task
    attempt that fails on a record; the block's error is then :class:`RecordFailure`. ``enabled`` False:
    the block runs unwatched."""
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
                text = _first_record_error(spark, tracker, group, earlier)
            except Py4JError:
                return  # the context is stopping: the job fails or ends by itself
            if text is not None:
                watch.error = RecordFailure(text)
                sc.cancelJobGroup(group)
                return

    thread = threading.Thread(target=look, name=f"record errors of {group}", daemon=True)
    thread.start()
    try:
        yield watch
    except Exception as e:
        if watch.error is not None:
            raise watch.error from e
        raise
    finally:
        stop.set()
        thread.join()


def _first_record_error(spark: Any, tracker: Any, group: str, earlier: frozenset[int]) -> str | None:
    """The error of a failed task attempt of ``group``'s jobs (not ``earlier``) that a record caused, if any."""
    for job in tracker.getJobIdsForGroup(group):
        info = None if job in earlier else tracker.getJobInfo(job)
        if info is None:
            continue
        for stage in info.stageIds:
            s = tracker.getStageInfo(stage)
            if s is None or not s.numFailedTasks:
                continue
            for text in failed_task_errors(spark, stage, s.currentAttemptId):
                text = text.split("\n\tat ", 1)[0].strip()  # the error, not its stack trace
                if record_error(RecordFailure(text)) is not None:
                    return text
    return None
