"""Spark's Python workers log as the driver does: time, level, logger, and the pipeline whose task runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

from app.logs import WORKER_LEVEL

#: A driver that logs at WARNING and runs one task in pipeline wc-1's job group; the task logs twice.
DRIVER = textwrap.dedent("""
    import logging

    from app.logs import configure
    from app.spark import spark_session

    configure("WARNING")
    spark = spark_session("local[1]", app_name="worker-logs")

    def task(rows):
        logging.getLogger("tests.worker").info("below the driver's level %d", 1)
        logging.getLogger("tests.worker").warning("hello from task %d", 7)
        yield 1

    spark.sparkContext.setJobGroup("wc-1:txid-3", "wc-1 txid 3 attempt 1: process")
    spark.sparkContext.parallelize([0], 1).mapPartitions(task).collect()
    spark.stop()
""")


@pytest.mark.slow
def test_a_workers_line_has_the_drivers_format_level_and_pipeline() -> None:
    """The task's warning reaches stderr (the executor's log; here the driver's process) as
    ``TIME WARNING tests.worker: pipeline wc-1: ...``; its INFO line stays below the driver's level. The whole
    stderr of a real local Spark is read: the worker is the one PySpark's daemon forked."""
    env = {k: v for k, v in os.environ.items() if k != WORKER_LEVEL}
    done = subprocess.run([sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    told = [line for line in done.stderr.splitlines() if "hello from task" in line or "below the driver's" in line]
    assert len(told) == 1, done.stderr[-3000:]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING tests\.worker: pipeline wc-1: hello from task 7",
                        told[0]), told
