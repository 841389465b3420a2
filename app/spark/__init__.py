"""Spark execution of a topology: the session, the batch executor, and what runs on executors.

    from app.spark import SparkExecutor, spark_session

    spark = spark_session("local[*]")
    executor = SparkExecutor(spark, topology)        # a BatchExecutor for app.coordinator.coordinator.Coordinator

Modules, by what they do:

- the driver's Spark: :mod:`.session` (the SparkSession and its defaults), :mod:`.masters` (which masters run
  on this machine, which state backends each can use), :mod:`.jvm` (PySpark's handles on the JVM),
  :mod:`.daemon` (PySpark's worker daemon), :mod:`.executor_watch` (a cluster with no executors says so),
  :mod:`.warmup` (a standby's Spark kept warm);
- a topology compiled for Spark: :mod:`.plan` (steps, aggregation, table specs), :mod:`.record_columns`
  (the record columns it reads), :mod:`.capture` (transforms in an error-capturing form), :mod:`.state_tables`
  (which tables a txid may create);
- the batch protocol as Spark jobs: :mod:`.batch_executor` (process and commit, :class:`SparkExecutor`) and its
  parts: :mod:`.reading` (the records read), :mod:`.processing` (the sinks run over them), :mod:`.committing`
  (results applied to states), :mod:`.sharding` (rows regrouped by shard), :mod:`.job_control` (job groups and
  pools) with :mod:`.parallelism` (task counts from the executors);
- bad records on Spark: :mod:`.bad_record_finding` (finding a txid's bad records the same way on every replay),
  :mod:`.record_isolation` (the records the transforms fail on, bisected and kept for replays) and
  :mod:`.isolation_report` (what an isolation tells people: ``/readyz``, metrics, log lines);
- :mod:`.tasks`: the picklable functions executors run.

May import :mod:`app.topology` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.coordinator`, :mod:`app.config`, :mod:`app.service` or :mod:`app.commands`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.spark.batch_executor import SparkBatch, SparkExecutor
    from app.spark.plan import TopologyCompileError
    from app.spark.processing import SinkResult
    from app.spark.session import spark_session
    from states.snapshottable import GLOBAL_KEY_COLUMN

__all__ = ["GLOBAL_KEY_COLUMN", "SinkResult", "SparkBatch", "SparkExecutor", "TopologyCompileError",
           "spark_session"]

#: Where each name lives: imported when first asked for, so that a module of this package that needs no
#: Spark (the plan, to read a table's layout) does not import PySpark by being in it.
_HOMES = {"SinkResult": "app.spark.processing", "SparkBatch": "app.spark.batch_executor",
          "SparkExecutor": "app.spark.batch_executor", "TopologyCompileError": "app.spark.plan",
          "spark_session": "app.spark.session", "GLOBAL_KEY_COLUMN": "states.snapshottable"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(_HOMES[name]), name)
