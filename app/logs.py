"""The service's log set-up: one format, library chatter at DEBUG, and every line of a pipeline naming it.

Each pipeline runs in a thread named ``pipeline-<id>``; a line logged from it that does not name the
pipeline (a retry, a lease renewal, a library's warning) gets ``pipeline <id>:`` in front, so a log of
several pipelines reads without guessing.

Spark's Python workers log the same way (:func:`configure_worker`, called by :mod:`app.spark.daemon` before it
forks them): a task's lines name the pipeline whose job it runs (Spark sends the job group with each task).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
THREAD_PREFIX = "pipeline-"  # app.service.runner names each pipeline's thread so
#: Spark's local property holding a job's group, sent with each task; ``app.spark.job_control`` and
#: ``app.spark.warmup`` name a pipeline's groups ``<pipeline>:<what>`` (a pipeline id has no colon).
JOB_GROUP = "spark.jobGroup.id"
#: The driver's level, for the workers it starts: they inherit its environment when Spark runs in the same
#: machine (local mode); workers of a cluster's executors log at INFO.
WORKER_LEVEL = "TRIDENT_WORKER_LOG_LEVEL"

#: Libraries whose start-up and connection chatter the service says in its own lines (shown with --debug):
#: the Cassandra driver's protocol negotiation and data-centre choice, py4j's connection closes.
QUIET_UNLESS_DEBUG = {"cassandra": logging.ERROR, "py4j": logging.WARNING}


def thread_pipeline() -> str | None:
    """The pipeline whose thread runs now (the driver's pipelines), or None."""
    name = threading.current_thread().name
    return name[len(THREAD_PREFIX):] if name.startswith(THREAD_PREFIX) else None


def task_pipeline() -> str | None:
    """The pipeline whose Spark task runs now in this Python worker (from the task's job group), or None."""
    from pyspark import TaskContext

    task = TaskContext.get()
    group = task.getLocalProperty(JOB_GROUP) if task is not None else None
    return group.partition(":")[0] if group else None


class NamesItsPipeline(logging.Filter):
    """Puts ``pipeline <id>:`` before a line logged for a pipeline that does not name it; ``pipeline`` says
    which one runs now (the driver's: by thread)."""

    def __init__(self, pipeline: Callable[[], str | None] = thread_pipeline) -> None:
        super().__init__()
        self.pipeline = pipeline

    def filter(self, record: logging.LogRecord) -> bool:
        pipeline = self.pipeline()
        if pipeline:
            message = record.getMessage()
            if pipeline not in message:
                record.msg, record.args = f"pipeline {pipeline}: {message}", ()
        return True


def configure(level: str, *, debug: bool = False) -> None:
    """Log to stderr at ``level`` (DEBUG with ``debug``), every pipeline's lines naming it."""
    effective = "DEBUG" if debug else level
    os.environ[WORKER_LEVEL] = effective  # for the Python workers of a local Spark started after this
    _configure(effective, NamesItsPipeline(), debug=debug)


def configure_worker() -> None:
    """Log a Spark Python worker as the driver logs (format, level, quiet libraries), each task's lines naming its
    pipeline. Called once in PySpark's daemon, before it forks the workers: they inherit it."""
    _configure(os.environ.get(WORKER_LEVEL, "INFO"), NamesItsPipeline(task_pipeline))


def _configure(level: str, namer: NamesItsPipeline, *, debug: bool = False) -> None:
    logging.basicConfig(level=level, format=LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, NamesItsPipeline) for f in handler.filters):
            handler.addFilter(namer)
    if not debug:
        for name, quiet in QUIET_UNLESS_DEBUG.items():
            logging.getLogger(name).setLevel(quiet)
