"""The audit's recount: the committed ranges read, transformed and aggregated by code the pipeline does not run.

1. Read every record of the ranges in Spark tasks of its own (one per range), each with a consumer of
   its own (:mod:`app.audit.source`): not the pipeline's read tasks, pooled consumers, native reader
   nor column pruning.
2. Decode keys and values with the spout's decoders (shared: the formats are the user's declaration,
   and a decoder bug would be found by a recount of its own formats only; ``docs/operations.md`` says so).
3. Apply the topology's transforms as the user wrote them (``selectExpr``, ``withColumns``, ``filter``,
   the user's function): not the pipeline's compiled steps, hidden source columns or error capture.
4. Find bad records by splitting: ranges whose job fails, or whose result has a null group-by key,
   are halved (on the records read once, cached) until each failing record is alone; the rest are
   the good records.
5. Aggregate the good records with Spark's built-in ``count``/``sum``/``min``/``max`` (a custom
   combiner with the user's own ``init``/``combine``), never the pipeline's combine or fold.

Aggregating all the ranges at once gives each key the value the stored table holds after the txids
that read them: every aggregator combines associatively.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

import pyarrow as pa

from app.audit.ranges import AuditRefusedError
from app.audit.source import RAW_SCHEMA, Range, ranges_of, read_ranges
from app.topology.topology import Agg, PersistentAggregate, Topology, Transform
from spouts.bad_records import BadRecord, Stage
from spouts.metadata import BatchPlan
from states.aggregators import STAMPED, CombinerAggregator, Count, Max, Min, Sum
from states.snapshottable import GLOBAL_KEY
from states.spec import MapSpec

Key = tuple[Any, ...]
_BUILTIN = (Count, Sum, Min, Max)
_NULL_KEY = "null_key"
BAD_COLUMN = "_audit_bad"  # set on a record the decoders refused (see ReadOwn)
SEPARATOR = "\x1f"
Place = tuple[str, int, int]  # topic, partition, offset


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

        from app.audit.dead_letters import kafka_of

        self.spark, self.topology, self.pipeline = spark, topology, pipeline
        spout = topology.source()
        self.decoder = getattr(spout, "decoder", None)
        self.kafka = kafka_of(spout)
        self.isolation = str(getattr(getattr(spout, "config", None), "isolation_level", "read_committed"))
        records = RAW_SCHEMA if self.decoder is None else self.decoder.schema
        self.arrow_schema = records.append(pa.field(BAD_COLUMN, pa.string()))
        self.read_schema = from_arrow_schema(self.arrow_schema, prefer_timestamp_ntz=False)
        self.records_schema = from_arrow_schema(records, prefer_timestamp_ntz=False)
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
        from pyspark.sql import functions as sf

        ranges = ranges_of(plan)
        read = self._read(ranges).persist()
        try:
            records = read.count()
            bad = [_undecodable(r) for r in read.filter(sf.col(BAD_COLUMN).isNotNull()).collect()]
            good = read.filter(sf.col(BAD_COLUMN).isNull()).drop(BAD_COLUMN)
            failing = self._failing(good, ranges) if self._fails(good) is not None else {}
            if failing:
                places = self.spark.createDataFrame(list(failing), "topic string, partition int, offset bigint")
                good = good.join(places, ["topic", "partition", "offset"], "left_anti")
            bad += [BadRecord(t, p, o, stage, reason, reason) for (t, p, o), (stage, reason) in failing.items()]
            sinks = tuple(SinkCount(s, self._partials(s, good, keep)) for s in self.sinks)
        finally:
            read.unpersist()
        return Recount(records, tuple(sorted(bad, key=lambda b: (b.topic, b.partition, b.offset))), sinks)

    def close(self) -> None:
        """Nothing is held between recounts (each task's consumer closes after its read)."""

    def _read(self, ranges: Sequence[Range]) -> Any:
        """The records of ``ranges`` read in Spark tasks (one per range) by :class:`ReadOwn`, the undecodable ones
        with ``BAD_COLUMN`` set."""
        if not ranges:
            return self.spark.createDataFrame([], self.read_schema)
        task = ReadOwn(self.kafka, self.isolation, self.pipeline, tuple(ranges), self.decoder, self.arrow_schema)
        return self.spark.range(0, len(ranges), 1, len(ranges)).mapInArrow(task, self.read_schema)

    def _failing(self, good: Any, ranges: Sequence[Range]) -> dict[Place, tuple[Stage, str]]:
        """The records of ``ranges`` in ``good`` (the decoded records, cached) that fail a sink's transforms or
        give a null group-by key, by halving the ranges until each failing record is alone."""
        from pyspark.sql import functions as sf

        if not ranges:
            return {}
        within = reduce(operator.or_, ((sf.col("topic") == t) & (sf.col("partition") == p) & (sf.col("offset") >= a)
                                       & (sf.col("offset") < b) for t, p, a, b in ranges))
        failure = self._fails(good.filter(within))
        if failure is None:
            return {}
        if len(ranges) > 1:
            half = len(ranges) // 2
            return {**self._failing(good, ranges[:half]), **self._failing(good, ranges[half:])}
        topic, partition, first, end = ranges[0]
        if end - first == 1:
            return {(topic, partition, first): failure}
        mid = (first + end) // 2
        return {**self._failing(good, [(topic, partition, first, mid)]),
                **self._failing(good, [(topic, partition, mid, end)])}

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
            found = rows.groupBy(*keys).agg(*exprs).toLocalIterator()
            out = {tuple(r[k] for k in keys): _value([r[a.output] for a in aggs]) for r in found}
        else:
            out = _folded(rows, keys, aggs)
        return {k: v for k, v in out.items() if keep is None or keep(k)}


@dataclass(frozen=True)
class ReadOwn:
    """A Spark task's read: input row ``id`` reads ``ranges[id]`` with :func:`app.audit.source.read_ranges` and
    decodes it with the spout's ``decoder``; an undecodable record is a row of its coordinates and
    ``BAD_COLUMN`` (``stage``, ``reason`` and ``message`` joined by a unit separator)."""

    kafka: dict[str, str]
    isolation: str
    pipeline: str
    ranges: tuple[Range, ...]
    decoder: Any
    schema: pa.Schema

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            for i in rb.column("id").to_pylist():
                for raw in read_ranges(self.kafka, self.isolation, [self.ranges[i]], self.pipeline):
                    yield from self._decoded(raw)

    def _decoded(self, raw: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        found: list[BadRecord] = []
        good = raw if self.decoder is None else self.decoder.decode(raw, found.append)
        yield pa.RecordBatch.from_arrays([*good.columns, pa.nulls(good.num_rows, pa.string())], schema=self.schema)
        if found:
            columns = {"topic": [b.topic for b in found], "partition": [b.partition for b in found],
                       "offset": [b.offset for b in found],
                       BAD_COLUMN: [SEPARATOR.join((b.stage.value, b.reason, b.message)) for b in found]}
            yield pa.RecordBatch.from_pydict(columns | {n: [None] * len(found) for n in self.schema.names
                                                        if n not in columns}, self.schema)


def _undecodable(row: Any) -> BadRecord:
    stage, reason, message = row[BAD_COLUMN].split(SEPARATOR, 2)
    return BadRecord(row["topic"], row["partition"], row["offset"], Stage(stage), reason, message)


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

