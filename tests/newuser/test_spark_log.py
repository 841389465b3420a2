"""Spark's part of the service's log: no banner or start-up chatter, no traceback for a task Spark retried.

A SparkSession started as the service starts it (logging at INFO) runs a job whose first task attempt fails
(as a read does when a broker is away for a moment) and is retried, then a query that fails for good. What
the process writes to stderr is compared: before, the banner came twice, with the host-name and native-library
warnings, and the retried task wrote its Python traceback twice inside Java ones (~8 KB).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.newuser.startup import ROOT

pytestmark = pytest.mark.slow

SCRIPT = """
import logging, os, sys
logging.basicConfig(level=sys.argv[2])
from app.spark.session import spark_session
spark = spark_session("local[2]")
marker = sys.argv[1]
def flaky(it):
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise ConnectionError("broker away for a moment")
    yield from it
print("count", spark.sparkContext.parallelize(range(10), 2).mapPartitions(flaky).count())
try:
    spark.sql("SELECT CAST('x' AS INT)").collect()
except Exception as e:
    print("failed", type(e).__name__)
spark.stop()
"""


def _run(tmp_path: Path, level: str) -> tuple[str, str]:
    marker = tmp_path / f"failed-once-{level}"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(marker), level], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert marker.exists()  # the first attempt did fail
    return done.stdout, done.stderr


def test_a_retried_task_and_spark_start_up_leave_no_traceback_or_banner(tmp_path: Path) -> None:
    out, err = _run(tmp_path, "INFO")
    assert "count 10" in out
    assert "failed NumberFormatException" in out
    assert "Traceback" not in err, err
    assert "\tat " not in err, err
    assert "Exception in task" not in err, err
    assert "log4j profile" not in err, err
    assert "Setting default log level" not in err, err
    assert "NativeCodeLoader" not in err, err
    assert "loopback address" not in err, err
    assert len(err) < 1000, err


def test_with_debug_spark_logs_as_it_does_by_itself(tmp_path: Path) -> None:
    """With the service at DEBUG, Spark's own log set-up applies: the retried task's traceback is there."""
    out, err = _run(tmp_path, "DEBUG")
    assert "count 10" in out
    assert err.count("Using Spark's default log4j profile") >= 1
    assert "Traceback" in err
