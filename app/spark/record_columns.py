"""Which of the spout's record columns a topology reads: the others are never built by the read tasks.

A read task builds each column of a record batch from the broker's messages in Python (one call per record
and column), and Spark converts every column it gets, used or not. A word count uses only ``value`` of
``topic, partition, offset, timestamp, key, value, headers``: building the other four cost 0.35 µs of
Python per record, and with their conversion in the JVM a txid of 200,000 records an eighth of its CPU.

Spark's optimizer knows which columns a plan reads (column pruning); it cannot see into the read task
(a Python UDF), so the columns are found once per executor on the plans the process job builds, from the
optimized plan of each form a sink's job may take (plain, with the keys checked per row, capturing
errors), and the read asks for those alone (:attr:`ReadColumns.named`). Such a read keeps the coordinates
(``topic``, ``partition``, ``offset``): bad records and isolation name records by them.

A txid's first run in the sinks' planned forms (:meth:`app.spark.processing.SinkRuns.planned`) may not
name any record: a sink whose keys are checked on its aggregate (a generator such as a word count's
``explode``) names records only in a job of its own, after its aggregate met a bad key. That run reads
the columns those plans use alone (:attr:`ReadColumns.planned`), the coordinates null in their place;
building and converting the three coordinates cost a word count a tenth of its CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.spark import capture as capture_
from app.spark.jvm import java_frame
from app.spark.plan import CompiledSink
from app.spark.processing import SinkRuns
from spouts.protocols import COORDINATES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadColumns:
    """The record columns a topology's reads build, in schema order."""

    named: tuple[str, ...]  # every read's: the columns any form of the sinks' plans uses, and the coordinates
    planned: tuple[str, ...]  # a run of the sinks' planned forms: the columns those plans use (the others null)


def read_columns(spark: Any, records_schema: Any, runs: SinkRuns, partitions: int) -> ReadColumns:
    """The columns of ``records_schema`` the process jobs of ``runs``' sinks read (:class:`ReadColumns`).

    Found while the sinks check keys in their planned forms (a new executor's). ``planned`` is ``named`` when
    a txid's first run captures errors, or a planned plan changes with a column nulled (it names records, or
    looks at what it is given); it holds one column at least (a record batch of no columns has no rows).
    """
    named = used_columns(spark, records_schema, runs, partitions)
    if runs.checks_rows() or runs.capturable():  # a capturing first run names the records its transforms fail on
        return ReadColumns(named, named)
    records = _records(spark, records_schema)
    plans = [runs.planned(c, records, partitions) for c in runs.sinks]
    used = set[str]().union(*(referenced_columns(p, records) for p in plans)) or {"offset"}
    planned = tuple(n for n in named if n in used)
    if planned == named:
        return ReadColumns(named, named)
    nulled = records.select(*padded(records_schema, planned))
    if not all(_same_result(a, runs.planned(c, nulled, partitions)) for c, a in zip(runs.sinks, plans, strict=True)):
        log.info("the planned runs read every column the sinks use: a plan changes with the others null")
        return ReadColumns(named, named)
    return ReadColumns(named, planned)


def padded(records_schema: Any, columns: tuple[str, ...]) -> list[Any]:
    """The columns of ``records_schema``: ``columns`` as read, the others null literals of their types."""
    from pyspark.sql import functions as sf

    return [sf.col(_quoted(f.name)) if f.name in columns else sf.lit(None).cast(f.dataType).alias(f.name)
            for f in records_schema.fields]


def used_columns(spark: Any, records_schema: Any, runs: SinkRuns, partitions: int) -> tuple[str, ...]:
    """The names of ``records_schema``'s fields the process jobs of ``runs``' sinks read, in schema order.

    All of them when a sink's plans differ from records of those columns only (a function transform that
    looks at the columns it is given): reading more than needed costs time, reading less would change results.
    """
    records = _records(spark, records_schema)
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


def _records(spark: Any, records_schema: Any) -> Any:
    """Records of ``records_schema`` from a Python read: planned, never run."""
    return spark.range(0, 1, 1, 1).mapInArrow(_no_records, records_schema)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _ids(attributes: Any) -> set[int]:
    return {a.exprId().id() for a in _seq(attributes)}


def _seq(scala_seq: Any) -> Iterator[Any]:
    return (scala_seq.apply(i) for i in range(scala_seq.size()))


def _no_records(batches: Iterator[Any]) -> Iterator[Any]:
    yield from ()

