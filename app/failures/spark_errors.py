"""Spark's errors read through their own accessors: the error condition of a PySpark or Py4J error and its causes.

PySpark raises on the driver an error that keeps the JVM exception it captured (``_origin``;
Py4J's ``Py4JJavaError`` keeps it in ``java_exception``); Spark's SQL errors name their condition
(``getCondition``, ``getErrorClass`` before Spark 4) and its parameters. Those are read here, never
the message: :func:`deterministic_spark_error` says whether a replay of the same records raises the
same error again, :func:`raised_message` what a SQL ``raise_error`` said.
"""

from __future__ import annotations

from typing import Any

from app.failures.causes import chain

#: Spark SQL error classes that a replay of the same records raises again (ANSI mode, bad casts,
#: arithmetic): the same input gives the same error on every attempt.
DETERMINISTIC_SPARK_ERRORS = frozenset({
    "CAST_INVALID_INPUT", "CAST_OVERFLOW", "DIVIDE_BY_ZERO", "ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE",
    "INVALID_ARRAY_INDEX", "INVALID_ARRAY_INDEX_IN_ELEMENT_AT", "MALFORMED_RECORD_IN_PARSING",
    "CANNOT_PARSE_TIMESTAMP", "INVALID_FRACTION_OF_SECOND", "DATATYPE_MISMATCH", "USER_RAISED_EXCEPTION",
})

#: How many JVM causes are followed at most (a cycle or a very deep chain ends the walk).
MAX_JAVA_CAUSES = 32


def error_key(e: BaseException) -> str:
    """What makes two failures "the same error": the Spark error class if there is one, else the type."""
    return deterministic_spark_error(e) or type(e).__name__


def deterministic_spark_error(e: BaseException) -> str | None:
    """The Spark error class of ``e`` (or of what it wraps, or of the JVM exceptions behind them) if replaying
    the same records repeats it; None otherwise."""
    for source in _sources(e):
        name = _condition(source)
        if name in DETERMINISTIC_SPARK_ERRORS:
            return name
    return None


def raised_message(e: BaseException) -> str | None:
    """The message a Spark SQL ``raise_error`` raised in ``e`` (or in what it wraps), read from the error's
    parameters (``USER_RAISED_EXCEPTION``'s ``errorMessage``); None for any other error."""
    for source in _sources(e):
        if _condition(source) != "USER_RAISED_EXCEPTION":
            continue
        try:
            message = source.getMessageParameters().get("errorMessage")
        except Exception:  # noqa: BLE001 - no parameters to read: not the error sought
            message = None
        if isinstance(message, str):
            return message
    return None


def _sources(e: BaseException) -> list[Any]:
    """``e``, what it wraps, and the JVM exceptions behind each, in that order."""
    return [source for err in chain(e) for source in (err, *_java_causes(err))]


def _condition(source: Any) -> str | None:
    for accessor in ("getCondition", "getErrorClass"):  # getErrorClass: before Spark 4
        get = getattr(source, accessor, None)
        try:
            name = get() if callable(get) else None
        except Exception:  # noqa: BLE001 - a JVM exception that is not a SparkThrowable has no condition
            name = None
        if isinstance(name, str) and name:
            return name.split(".")[0]
    return None


def _java_causes(error: BaseException) -> list[Any]:
    """The JVM exception behind a PySpark error raised on the driver, and its causes (empty for any other)."""
    # PySpark keeps the Java exception it captured in ``_origin``; py4j's Py4JJavaError (a direct call on a
    # JVM object, e.g. an RDD count of a query's plan) in ``java_exception``
    cause = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
    out: list[Any] = []
    while cause is not None and len(out) < MAX_JAVA_CAUSES:
        out.append(cause)
        try:
            cause = cause.getCause()
        except Exception:  # noqa: BLE001 - a JVM gone or a foreign object: no more causes to read
            break
    return out
