"""Which of the spout's record columns a topology reads: the others are never built by the read tasks.

A read task builds each column of a record batch from the broker's messages in Python (one call per record
and column), and Spark converts every column it gets, used or not. A word count uses only ``value`` of
``topic, partition, offset, timestamp, key, value, headers``: building the other four cost 0.35 µs of
Python per record, and with their conversion in the JVM a txid of 200,000 records an eighth of its CPU.

Spark's optimizer knows which columns a plan reads (column pruning); it cannot see into the read task
(a Python UDF), so the columns are found once per executor on the plans the process job builds, from the
optimized plan of each form a sink's job may take (plain, with the keys checked per row, capturing
errors), and the read asks for those alone. The coordinates (``topic``, ``partition``, ``offset``) are
always read: bad records and isolation name records by them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from app.spark import capture as capture_
from app.spark.jvm import java_frame
from app.spark.plan import CompiledSink
from app.spark.processing import SinkRuns
from spouts.protocols import COORDINATES

log = logging.getLogger(__name__)

def used_columns(spark: Any, records_schema: Any, runs: SinkRuns, partitions: int) -> tuple[str, ...]:
    """The names of ``records_schema``'s fields the process jobs of ``runs``' sinks read, in schema order.

    All of them when a sink's plans differ from records of those columns only (a function transform that
    looks at the columns it is given): reading more than needed costs time, reading less would change results.
    """
    records = spark.range(0, 1, 1, 1).mapInArrow(_no_records, records_schema)  # planned, never run
    built = [(c, list(_plans(c, records, runs, partitions))) for c in runs.sinks]
    used = set(COORDINATES)
    for _, plans in built:
        for plan in plans:
            used |= referenced_columns(plan, records)
    names = tuple(f.name for f in records_schema.fields if f.name in used)
    if len(names) == len(records_schema.fields):
        return names
    fewer = records.select(*names)
    for c, plans in built:
        if not all(_same_result(a, b) for a, b in zip(plans, _plans(c, fewer, runs, partitions), strict=True)):
            log.info("sink %s reads every record column: its plan changes without the ones it does not read",
                     c.sink.name)
            return tuple(f.name for f in records_schema.fields)
    return names


def referenced_columns(frame: Any, records: Any) -> set[str]:
    """The columns of ``records`` that ``frame`` (built on it) uses, by its optimized plan."""
    plan = java_frame(frame).queryExecution().optimizedPlan()
    used, stack = _ids(plan.output()), [plan]
    while stack:
        node = stack.pop()
        used |= _ids(node.references().toSeq())
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return {a.name() for a in _seq(java_frame(records).queryExecution().analyzed().output()) if a.exprId().id() in used}


def _plans(c: CompiledSink, records: Any, runs: SinkRuns, partitions: int) -> Iterator[Any]:
    """Every form of ``c``'s result a process job may build from ``records``."""
    yield runs.planned(c, records, partitions)
    yield c.aggregate(runs.keyed_rows(c, records)[0], partitions)
    if capture_.capturable(c.steps) and c.carries_source:
        yield c.aggregate(runs.keyed_rows(c, records, capture=True)[0], partitions)


def _same_result(a: Any, b: Any) -> bool:
    """Whether two DataFrames' optimized plans compute the same rows (Spark's canonical form)."""
    return bool(java_frame(a).queryExecution().optimizedPlan().sameResult(java_frame(b).queryExecution().optimizedPlan()))


def _ids(attributes: Any) -> set[int]:
    return {a.exprId().id() for a in _seq(attributes)}


def _seq(scala_seq: Any) -> Iterator[Any]:
    return (scala_seq.apply(i) for i in range(scala_seq.size()))


def _no_records(batches: Iterator[Any]) -> Iterator[Any]:
    yield from ()

