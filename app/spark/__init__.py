"""Spark execution of a topology: the session, the executor, and what runs on executors.

    from app.spark import SparkExecutor, spark_session

    spark = spark_session("local[*]")
    executor = SparkExecutor(spark, topology)        # a BatchExecutor for app.coordinator.coordinator.Coordinator

Modules: :mod:`.session` (the SparkSession and its defaults), :mod:`.plan` (a topology compiled
to steps, aggregations and table specs), :mod:`.tasks` (the picklable functions executors run),
:mod:`.executor` (process and commit as Spark jobs), and its parts: :mod:`.reading` (the records read),
:mod:`.processing` (the sinks run over them), :mod:`.record_isolation` (records the transforms fail on),
:mod:`.committing` (results applied to states), :mod:`.job_control` (job groups, pools, parallelism);
:mod:`.fatal` (fatal errors carried back from tasks).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.spark.executor import SparkBatch, SparkExecutor
    from app.spark.plan import TopologyCompileError
    from app.spark.processing import SinkResult
    from app.spark.session import spark_session
    from states.snapshottable import GLOBAL_KEY_COLUMN

__all__ = ["GLOBAL_KEY_COLUMN", "SinkResult", "SparkBatch", "SparkExecutor", "TopologyCompileError",
           "spark_session"]

#: Where each name lives: imported when first asked for, so that a module of this package that needs no
#: Spark (the plan, to read a table's layout) does not import PySpark by being in it.
_HOMES = {"SinkResult": "app.spark.processing", "SparkBatch": "app.spark.executor",
          "SparkExecutor": "app.spark.executor", "TopologyCompileError": "app.spark.plan",
          "spark_session": "app.spark.session", "GLOBAL_KEY_COLUMN": "states.snapshottable"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(_HOMES[name]), name)
