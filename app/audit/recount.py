"""The audit's recount: the committed ranges read, transformed and aggregated by code the pipeline does not run.

1. Read every record of the ranges with a consumer of its own (:mod:`app.audit.source`): not the
   pipeline's read tasks, pooled consumers, native reader nor column pruning.
2. Decode keys and values with the spout's decoders (shared: the formats are the user's declaration,
   and a decoder bug would be found by a recount of its own formats only; ``docs/operations.md`` says so).
3. Apply the topology's transforms as the user wrote them (``selectExpr``, ``withColumns``, ``filter``,
   the user's function), on a DataFrame made on the driver from the records: not the pipeline's
   compiled steps, hidden source columns or error capture.
4. Find bad records by splitting: a set of records whose job fails, or whose result has a null
   group-by key, is split in halves until each failing record is alone; the rest are the good records.
5. Aggregate the good records with Spark's built-in ``count``/``sum``/``min``/``max`` (a custom
   combiner with the user's own ``init``/``combine``), never the pipeline's combine or fold.

Aggregating all the ranges at once gives each key the value the stored table holds after the txids
that read them: every aggregator combines associatively.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pyarrow as pa

from app.audit.ranges import AuditRefusedError
from app.audit.source import RAW_SCHEMA, read_ranges
from app.topology import Agg, PersistentAggregate, Topology, Transform
from spouts.bad_records import BadRecord, Stage
from spouts.metadata import BatchPlan
from states.aggregators import STAMPED, CombinerAggregator, Count, Max, Min, Sum
from states.snapshottable import GLOBAL_KEY
from states.spec import MapSpec

Key = tuple[Any, ...]
_BUILTIN = (Count, Sum, Min, Max)
_NULL_KEY = "null_key"


@dataclass(frozen=True)
class AuditedSink:
    """One sink as the audit sees it: the table it writes (``spec``: its columns, to read the stored rows), the
    aggregator of its stored value, and the user's transforms that feed it."""

    sink: PersistentAggregate
    spec: MapSpec
    aggregator: CombinerAggregator
    transforms: tuple[Transform, ...]


@dataclass
class SinkCount:
    """One sink's recount: the partial per key (as a commit would combine it)."""

    compiled: AuditedSink
    partials: dict[Key, Any] = field(default_factory=dict)


@dataclass
class Recount:
    """What the ranges hold, counted: records read, the bad records left out, each sink's partials."""

    records: int
    bad_records: tuple[BadRecord, ...]
    sinks: tuple[SinkCount, ...]


class Recounter:
    """Recounts ranges of ``topology``'s source independently of the pipeline (see the module docstring)."""

    def __init__(self, spark: Any, topology: Topology, pipeline: str) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        self.spark, self.topology, self.pipeline = spark, topology, pipeline
        spout = topology.source()
        decoder = getattr(spout, "decoder", None)
        self.decoder = decoder
        self.arrow_schema = RAW_SCHEMA if decoder is None else decoder.schema
        self.records_schema = from_arrow_schema(self.arrow_schema, prefer_timestamp_ntz=False)
        self.sinks = tuple(self._audited(stream.transforms, sink) for stream, sink in topology.sinks
                           if isinstance(sink, PersistentAggregate))

    def _audited(self, transforms: tuple[Transform, ...], sink: PersistentAggregate) -> AuditedSink:
        from app.spark.plan import compile_sink, value_aggregator

        if sink.tombstones == "delete" or any(isinstance(a.aggregator, STAMPED) for a in sink.aggregates):
            msg = (f"table {sink.name}: latest/first aggregates and deleting tombstones are not recounted by the "
                   "audit (it aggregates with Spark's count, sum, min and max and custom combiners only)")
            raise AuditRefusedError(msg)
        empty = self.spark.createDataFrame([], self.records_schema)
        spec = compile_sink(empty, transforms, sink).spec  # the stored columns' names and types only
        return AuditedSink(sink, spec, value_aggregator(sink.stored_aggregates), transforms)

    def count(self, plan: BatchPlan, *, keep: Callable[[Key], bool] | None = None) -> Recount:
        """Read and aggregate ``plan``'s ranges; ``keep``: the keys wanted (all when None)."""
        from app.audit.dead_letters import kafka_of

        spout = self.topology.source()
        isolation = getattr(getattr(spout, "config", None), "isolation_level", "read_committed")
        raw = read_ranges(kafka_of(spout), isolation, plan, self.pipeline)
        bad: list[BadRecord] = []
        records = self._decoded(raw, bad.append)
        failing = self._failing(records, range(records.num_rows))
        bad += [BadRecord(*_place(records, i), stage, reason, reason) for i, (stage, reason) in sorted(failing.items())]
        good = records.filter(pa.array([i not in failing for i in range(records.num_rows)], pa.bool_())) \
            if failing else records
        frame = self._frame(good)
        sinks = tuple(SinkCount(s, self._partials(s, frame, keep)) for s in self.sinks)
        return Recount(raw.num_rows, tuple(sorted(bad, key=lambda b: (b.topic, b.partition, b.offset))), sinks)

    def close(self) -> None:
        """Nothing is held between recounts (the consumer closes after each read)."""

    def _decoded(self, raw: pa.Table, on_bad: Callable[[BadRecord], None]) -> pa.Table:
        if self.decoder is None:
            return raw
        batches = [self.decoder.decode(b, on_bad) for b in raw.to_batches()]
        return pa.Table.from_batches(batches, self.arrow_schema)

    def _frame(self, records: pa.Table) -> Any:
        if records.num_rows == 0:
            return self.spark.createDataFrame([], self.records_schema)
        return self.spark.createDataFrame(records, self.records_schema)

    def _failing(self, records: pa.Table, rows: Sequence[int]) -> dict[int, tuple[Stage, str]]:
        """The rows of ``records`` that fail a sink's transforms or give a null group-by key, by halving."""
        if not rows:
            return {}
        part = records.take(pa.array(list(rows), pa.int64()))
        failure = self._fails(self._frame(part))
        if failure is None:
            return {}
        if len(rows) == 1:
            return {rows[0]: failure}
        half = len(rows) // 2
        return {**self._failing(records, rows[:half]), **self._failing(records, rows[half:])}

    def _fails(self, frame: Any) -> tuple[Stage, str] | None:
        """Why ``frame``'s records fail some sink (None: they do not)."""
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as sf

        for s in self.sinks:
            try:
                rows = transformed(frame, s.transforms, s.sink)
                keys = s.sink.group_by
                if keys and rows.filter(reduce(operator.or_, (sf.col(k).isNull() for k in keys))).limit(1).count():
                    return Stage.AGGREGATE, _NULL_KEY
                rows.agg(*_builtin(s.sink.aggregates, checking=True)).collect()
            except PySparkException as e:
                return Stage.TRANSFORM, str(e.getCondition() or type(e).__name__)
        return None

    def _partials(self, s: AuditedSink, frame: Any, keep: Callable[[Key], bool] | None) -> dict[Key, Any]:
        rows = transformed(frame, s.transforms, s.sink)
        keys, aggs = s.sink.group_by, s.sink.aggregates
        if all(isinstance(a.aggregator, _BUILTIN) for a in aggs):
            from pyspark.sql import functions as sf

            exprs = _builtin(aggs)
            if not keys:
                [row] = rows.agg(*exprs, sf.count(sf.lit(1)).alias("_rows")).collect()
                return {} if row["_rows"] == 0 else {GLOBAL_KEY: _value([row[a.output] for a in aggs])}
            found = rows.groupBy(*keys).agg(*exprs).collect()
            out = {tuple(r[k] for k in keys): _value([r[a.output] for a in aggs]) for r in found}
        else:
            out = _folded(rows, keys, aggs)
        return {k: v for k, v in out.items() if keep is None or keep(k)}


def transformed(frame: Any, transforms: Sequence[Transform], sink: PersistentAggregate) -> Any:
    """``frame`` through the user's ``transforms`` as written (a sink that ignores tombstones skips null values)."""
    from pyspark.sql import functions as sf

    if sink.tombstones == "ignore":
        frame = frame.filter(sf.col("value").isNotNull())
    for t in transforms:
        if t.kind == "select":
            frame = frame.selectExpr(*t.exprs)
        elif t.kind == "with":
            frame = frame.withColumns({frame.selectExpr(e).columns[0]: sf.expr(e) for e in t.exprs})
        elif t.kind == "filter":
            frame = frame.filter(t.exprs[0])
        elif t.function is not None:
            frame = t.function(frame)
    return frame


def _builtin(aggs: Sequence[Agg], *, checking: bool = False) -> list[Any]:
    """Spark's own aggregate of each ``Agg`` (``checking``: every input column, to evaluate it on every row)."""
    from pyspark.sql import functions as sf

    out = []
    for a in aggs:
        agg, col = a.aggregator, (sf.col(a.input) if a.input is not None else None)
        if col is None or isinstance(agg, Count):
            out.append(sf.count(sf.lit(1)).alias(a.output))
        elif checking or not isinstance(agg, _BUILTIN):
            out.append(sf.count(col).alias(a.output))
        elif isinstance(agg, Sum):
            out.append(sf.coalesce(sf.sum(col), sf.lit(0)).alias(a.output))
        else:
            out.append((sf.min(col) if isinstance(agg, Min) else sf.max(col)).alias(a.output))
    return out


def _folded(rows: Any, keys: Sequence[str], aggs: Sequence[Agg]) -> dict[Key, Any]:
    """A custom combiner's partials: the user's ``init``/``combine`` over the rows, on the driver."""
    out: dict[Key, list[Any]] = {}
    inputs = [a.input for a in aggs]
    for r in rows.select(*keys, *(i for i in dict.fromkeys(inputs) if i is not None)).toLocalIterator():
        key = tuple(r[k] for k in keys) if keys else GLOBAL_KEY
        init = [a.aggregator.init(r[a.input] if a.input is not None else None) for a in aggs]
        had = out.get(key)
        out[key] = init if had is None else [a.aggregator.combine(x, y) for a, x, y in zip(aggs, had, init, strict=True)]
    return {k: _value(v) for k, v in out.items()}


def _value(values: list[Any]) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def _place(records: pa.Table, i: int) -> tuple[str, int, int]:
    return (records.column("topic")[i].as_py(), records.column("partition")[i].as_py(),
            records.column("offset")[i].as_py())
