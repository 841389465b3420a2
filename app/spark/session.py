"""The service's SparkSession: workers run this interpreter, Arrow on, small-machine defaults.

    spark = spark_session()                                  # local[*,4]
    spark = spark_session("spark://master:7077", conf={"spark.executor.memory": "2g"})

Local mode and task retries: Spark's plain ``local[N]`` master gives every task exactly one
attempt (``spark.task.maxFailures`` is ignored in local mode), so one failed executor task would
fail the whole job and make the coordinator replay the txid. ``local[N,F]`` allows F attempts;
a local master without F gets :data:`LOCAL_TASK_ATTEMPTS` (4, the cluster-mode default of
``spark.task.maxFailures``). A retried task is safe: reads re-read the same frozen ranges, and
commits go through compare-and-set on opaque values.

Cluster masters (``spark://``, ``k8s://``, ``yarn``) are passed through; their executors must run
an image with this service installed (the same interpreter path, see ``spark.pyspark.python``).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.spark.masters import parse_local

LOCAL_TASK_ATTEMPTS = 4
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


def local_master(master: str, attempts: int = LOCAL_TASK_ATTEMPTS) -> str:
    """``master`` with a task-attempt count when it is a local master without one; others unchanged."""
    local = parse_local(master)
    if local is None:
        return master
    return str(local if local.attempts is not None else replace(local, attempts=attempts))


def local_cores(master: str) -> int | None:
    """N of a local master ``local[N]`` (``*``: this machine's cores); None for a cluster master."""
    local = parse_local(master)
    if local is None:
        return None
    return (os.cpu_count() or 1) if local.threads is None else max(1, local.threads)


#: The driver JVM's log set-up unless the service logs at DEBUG: Spark's start-up chatter and banner left out,
#: a warning one line without its stack trace, a retried task's tracebacks not at all (the file says why).
LOG4J2 = Path(__file__).with_name("log4j2.properties")


def default_conf(master: str, *, debug: bool = False) -> dict[str, str]:
    """The settings :func:`spark_session` applies unless ``conf`` overrides them (``debug``: Spark's own log)."""
    conf = {
        "spark.pyspark.python": sys.executable,  # workers run the service's own interpreter...
        "spark.pyspark.driver.python": sys.executable,  # ...and so does the driver
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",  # clients (Kafka consumers, DB sessions) live per worker process
        "spark.python.daemon.module": "app.spark.daemon",  # no full gc.collect() after every task
        "spark.scheduler.mode": "FAIR",  # process N+1 and commit N share the executors (pools per phase)
        "spark.sql.session.timeZone": "UTC",
        # Off, as Structured Streaming has it: adaptive execution runs every shuffle stage as a job of its
        # own and re-sizes shuffle partitions per batch (a key's commit partition would move with the
        # batch size). Off, a txid is two jobs at most: process (read, aggregate, cache) and commit.
        "spark.sql.adaptive.enabled": "false",
    }
    if not debug and LOG4J2.is_file():  # the driver JVM reads it as it starts: before its first line
        conf["spark.driver.defaultJavaOptions"] = f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}"
    pools = Path(__file__).with_name("fairscheduler.xml")
    if pools.is_file():  # the pools' weights; without it Spark makes them with defaults (and a warning)
        conf["spark.scheduler.allocation.file"] = str(pools)
    cores = local_cores(master)
    if cores is not None:  # one machine: a shuffle partition, hence a commit task, per core (a cluster sizes these)
        conf["spark.sql.shuffle.partitions"] = str(cores)
        conf["spark.default.parallelism"] = str(cores)
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Workers import the service from the same checkout (an installed package needs nothing).
        conf["spark.executorEnv.PYTHONPATH"] = PROJECT_ROOT
    return conf


def spark_session(master: str = "local[*]", app_name: str = "trident-stream",
                  conf: Mapping[str, Any] | None = None, *, log_level: str = "WARN") -> Any:
    """Create (or reuse) the process's SparkSession with the service's defaults and ``conf`` on top.

    A session that already runs is reused as it is (Spark allows one SparkContext per process);
    its runtime SQL settings from ``conf`` are applied to it.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    master = local_master(master)
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    defaults, given = default_conf(master, debug=debug), {str(k): str(v) for k, v in (conf or {}).items()}
    settings = {**defaults, **given}
    active = SparkSession.getActiveSession()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if active is None:
        spark.sparkContext.setLogLevel(log_level)
    quiet_query_context_loggers()
    return spark


#: PySpark's loggers that log every captured SQL error with its whole JVM stack trace (~16 KB), whether or
#: not anyone handles it: each bad record a transform fails on would write one. The service logs its own
#: line per bad record (coordinates and reason); these are for whoever runs at DEBUG.
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_query_context_loggers() -> None:
    """Let PySpark's query-context loggers through only when the service logs at DEBUG."""
    from pyspark.logger import PySparkLogger

    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    for name in QUERY_CONTEXT_LOGGERS:  # created as PySpark's own class, which a plain logger would replace
        PySparkLogger.getLogger(name).setLevel(logging.DEBUG if debug else logging.CRITICAL + 1)
