"""PySpark's handles on the JVM, in one place.

PySpark keeps its py4j objects behind underscore names (``_jvm``, ``_jdf``, ``_jc``...). The product needs a
few of them (observed metrics, log levels, registered executors, try-eval columns, failed tasks' errors in
Spark's status store, which Spark keeps ``private[spark]``); every access goes through these functions, so a
Spark upgrade that renames one breaks one module.
"""

from __future__ import annotations

from typing import Any


def gateway(spark: Any) -> Any:
    """The JVM view of a session's driver (``jvm.org.apache...``)."""
    return spark.sparkContext._jvm  # PySpark's py4j gateway has no public name


def active_gateway() -> Any:
    """The JVM view of the active Spark context of this thread; fails when none is active."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context  # the active context has no public accessor
    if sc is None or sc._jvm is None:  # see above
        msg = "no active Spark context in this thread"
        raise RuntimeError(msg)
    return sc._jvm  # see above


def java_frame(frame: Any) -> Any:
    """The JVM ``Dataset`` behind a PySpark DataFrame."""
    return frame._jdf  # PySpark's handle on the JVM Dataset


def java_column(column: Any) -> Any:
    """The JVM ``Column`` behind a PySpark column."""
    return column._jc  # PySpark's handle on the JVM Column


def java_session(spark: Any) -> Any:
    """The JVM ``SparkSession`` behind a PySpark session."""
    return spark._jsparkSession  # PySpark's handle on the JVM session


def java_context(spark: Any) -> Any:
    """The JVM ``SparkContext`` behind a PySpark session."""
    return spark.sparkContext._jsc.sc()  # PySpark's handle on the JVM context
