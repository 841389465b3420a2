"""A Python worker's line names the pipeline of the Spark task it runs, taken from the task's job group."""

from __future__ import annotations

import io
import logging

import pytest
from pyspark import TaskContext

from app.logs import JOB_GROUP, NamesItsPipeline, task_pipeline


class Task:
    """What a task's context answers: its job group, as Spark sends it with the task."""

    def __init__(self, group: str | None) -> None:
        self.group = group

    def getLocalProperty(self, key: str) -> str | None:  # PySpark's name
        return self.group if key == JOB_GROUP else None


def test_a_tasks_lines_name_its_pipeline_and_others_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(NamesItsPipeline(task_pipeline))
    logger = logging.getLogger("tests.app.worker_names")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for running in (Task("wc-1:txid-3"), Task("orders_v2:warm-up"), Task(None), None):
            monkeypatch.setattr(TaskContext, "get", classmethod(lambda _cls, t=running: t))
            logger.warning("FAIL [rdkafka#consumer-1] broker down")
        logger.warning("pipeline wc-1 said it already")  # outside a task: as it is
    finally:
        logger.removeHandler(handler)
    assert out.getvalue().splitlines() == ["pipeline wc-1: FAIL [rdkafka#consumer-1] broker down",
                                           "pipeline orders_v2: FAIL [rdkafka#consumer-1] broker down",
                                           "FAIL [rdkafka#consumer-1] broker down",
                                           "FAIL [rdkafka#consumer-1] broker down",
                                           "pipeline wc-1 said it already"]
