"""Spark execution of a topology: the session, the executor, and what runs on executors.

    from app.spark import SparkExecutor, spark_session

    spark = spark_session("local[*]")
    executor = SparkExecutor(spark, topology)        # a BatchExecutor for app.coordinator.Coordinator

Modules: :mod:`.session` (the SparkSession and its defaults), :mod:`.plan` (a topology compiled
to steps, aggregations and table specs), :mod:`.tasks` (the picklable functions executors run),
:mod:`.executor` (process and commit as Spark jobs), :mod:`.fatal` (fatal errors carried back from tasks).
"""

from app.spark.executor import SinkResult, SparkBatch, SparkExecutor
from app.spark.plan import TopologyCompileError
from app.spark.session import spark_session
from states.snapshottable import GLOBAL_KEY_COLUMN

__all__ = ["GLOBAL_KEY_COLUMN", "SinkResult", "SparkBatch", "SparkExecutor", "TopologyCompileError",
           "spark_session"]
