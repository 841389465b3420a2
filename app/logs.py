"""The service's log set-up: one format, library chatter at DEBUG, and every line of a pipeline naming it.

Each pipeline runs in a thread named ``pipeline-<id>``; a line logged from it that does not name the
pipeline (a retry, a lease renewal, a library's warning) gets ``pipeline <id>:`` in front, so a log of
several pipelines reads without guessing.
"""

from __future__ import annotations

import logging
import threading

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
THREAD_PREFIX = "pipeline-"  # app.service names each pipeline's thread so

#: Libraries whose start-up and connection chatter the service says in its own lines (shown with --debug):
#: the Cassandra driver's protocol negotiation and data-centre choice, py4j's connection closes.
QUIET_UNLESS_DEBUG = {"cassandra": logging.ERROR, "py4j": logging.WARNING}


class NamesItsPipeline(logging.Filter):
    """Puts ``pipeline <id>:`` before a line logged from a pipeline's thread that does not name it."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = threading.current_thread().name
        if name.startswith(THREAD_PREFIX):
            pipeline = name[len(THREAD_PREFIX):]
            message = record.getMessage()
            if pipeline not in message:
                record.msg, record.args = f"pipeline {pipeline}: {message}", ()
        return True


def configure(level: str, *, debug: bool = False) -> None:
    """Log to stderr at ``level`` (DEBUG with ``debug``), every pipeline's lines naming it."""
    logging.basicConfig(level="DEBUG" if debug else level, format=LOG_FORMAT)
    namer = NamesItsPipeline()
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, NamesItsPipeline) for f in handler.filters):
            handler.addFilter(namer)
    if not debug:
        for name, quiet in QUIET_UNLESS_DEBUG.items():
            logging.getLogger(name).setLevel(quiet)
