"""A topology compiled for Spark, once per executor: transform steps, aggregation, typed table specs.

Compiling runs the topology on an empty DataFrame of the spout's schema (analysis only, no Spark
job): a bad SQL expression fails at start-up, and every sink's :class:`~states.spec.MapSpec` is
known before the first batch (key columns typed from the group-by fields, value columns from the
aggregate outputs).

How a sink aggregates a batch:

* ``builtin``: every aggregator is Count, Sum, Min, Max, Latest or First: Spark's own ``count``/
  ``sum``/``min``/``max`` (map-side combine, no Python); ``latest``/``first`` are ``max``/``min``
  of ``struct(timestamp, partition, offset, value)`` over the record place :mod:`app.topology.upserts` carries.
* ``fold``: some aggregator is a custom ``combiner(...)``: a Python fold on executors, Arrow in and
  out: ``init``+``combine`` per input partition, shuffle the partials by key, ``combine`` again.
  A custom aggregate's values have its input column's type (``bigint`` without an input column).
* ``rows``: a ``partition_persist`` sink: the key and value columns of every row, no aggregation.

Values match :class:`app.topology.local.LocalExecutor`: Count counts rows, Sum ignores nulls (0 when all
are null), Min/Max ignore nulls, a group with no rows produces nothing.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.spark.tasks import COMMIT_PARTITION_COLUMN, Fold
from app.topology.topology import Agg, PartitionPersist, PersistentAggregate, Transform
from app.topology.upserts import PLACE_COLUMN, hidden_columns, is_stamped, upsert_transforms
from states.aggregators import STAMPED, CombinerAggregator, Count, First, Max, Min, Sum
from states.snapshottable import GLOBAL_KEY_COLUMN
from states.spec import Column, MapSpec

COUNT_COLUMN = "_n"  # rows behind a global aggregate (an output name can't start with "_")
SOURCE_COLUMN = "_source"  # struct<topic, partition, offset>: the source record of a row, through every transform
SOURCE_SQL = "named_struct('topic', `topic`, 'partition', CAST(`partition` AS BIGINT), 'offset', `offset`)"
#: Spark SQL's generator functions (a record may yield several rows, or none).
_GENERATORS = re.compile(r"\b(explode|explode_outer|posexplode|posexplode_outer|inline|inline_outer|stack|json_tuple"
                         r"|variant_explode|variant_explode_outer)\s*\(", re.IGNORECASE)
BUILTIN = (Count, Sum, Min, Max, *STAMPED)


class Mode(enum.StrEnum):
    """How a sink aggregates a batch (see the module docstring)."""

    BUILTIN = "builtin"
    FOLD = "fold"
    ROWS = "rows"


_SPECS: dict[tuple[Any, str], MapSpec] = {}  # (factory, table) -> spec compiled in this process


def register_spec(sink: PersistentAggregate | PartitionPersist, spec: MapSpec) -> None:
    _SPECS[(sink.factory, sink.name)] = spec


def registered_spec(sink: PersistentAggregate | PartitionPersist) -> MapSpec | None:
    """The spec a SparkExecutor of this process compiled for ``sink`` (see :mod:`app.query`)."""
    return _SPECS.get((sink.factory, sink.name))


class TopologyCompileError(ValueError):
    """A topology Spark cannot run as given (an unsupported column type, a missing column)."""


def column_type(data_type: Any, what: str) -> str:
    """The state column type (``states.spec.COLUMN_TYPES``) of a Spark SQL type."""
    name = type(data_type).__name__
    mapped = {"StringType": "text", "LongType": "bigint", "IntegerType": "bigint", "ShortType": "bigint",
              "ByteType": "bigint", "DoubleType": "double", "FloatType": "double", "BooleanType": "boolean",
              "BinaryType": "blob", "TimestampType": "timestamp", "TimestampNTZType": "timestamp"}.get(name)
    if mapped is None:
        msg = (
            f"{what} has Spark type {data_type.simpleString()}, which no state column "
            "can hold; CAST it to STRING, BIGINT, DOUBLE, BOOLEAN, BINARY or TIMESTAMP"
        )
        raise TopologyCompileError(msg)
    return mapped


def one_row_per_record(steps: Sequence[Step]) -> bool:
    """Whether ``steps`` turn a record into one row at most: SQL only, no generator such as ``explode``."""
    return all(s.transform.kind != "function" and not any(_GENERATORS.search(e) for e in s.transform.exprs)
               for s in steps)


@dataclass(frozen=True, slots=True)
class TupleAggregator:
    """Several aggregators over a tuple value, element by element (a sink with several Aggs)."""

    aggregators: tuple[CombinerAggregator, ...]
    name: str = "tuple"

    def init(self, value: Any) -> tuple[Any, ...]:
        return tuple(a.init(v) for a, v in zip(self.aggregators, value, strict=True))

    def combine(self, a: Any, b: Any) -> tuple[Any, ...]:
        return tuple(agg.combine(x, y) for agg, x, y in zip(self.aggregators, a, b, strict=True))

    def zero(self) -> tuple[Any, ...]:
        return tuple(a.zero() for a in self.aggregators)

    def partial_of(self, column: Any) -> tuple[Any, ...]:
        """Each element as its aggregator takes it from a result column (see ``combine_updater``)."""
        return tuple(getattr(a, "partial_of", _same)(v) for a, v in zip(self.aggregators, column, strict=True))


def _same(value: Any) -> Any:
    return value


def value_aggregator(aggs: Sequence[Agg]) -> CombinerAggregator:
    """The aggregator of a sink's stored value: a scalar for one Agg, a tuple for several."""
    return aggs[0].aggregator if len(aggs) == 1 else TupleAggregator(tuple(a.aggregator for a in aggs))


@dataclass(frozen=True, slots=True)
class Step:
    """One transform, ready to apply to a batch's DataFrame (``names``: the column each expression makes, but
    for a ``select``'s stars; none for a ``filter`` or a function)."""

    transform: Transform
    names: tuple[str, ...] = ()

    def apply(self, df: Any) -> Any:
        from pyspark.sql import functions as sf

        t = self.transform
        if t.kind == "select":
            return df.selectExpr(*t.exprs)
        if t.kind == "with":
            return df.withColumns({n: sf.expr(e) for n, e in zip(self.names, t.exprs, strict=True)})
        if t.kind == "filter":
            return df.filter(t.exprs[0])
        if t.function is None:
            msg = f"a {t.kind!r} transform without its function"
            raise TopologyCompileError(msg)
        return t.function(df)


def is_star(expr: str) -> bool:
    """Whether ``expr`` is ``*`` or ``x.*`` (it makes as many columns as it finds)."""
    e = expr.strip()
    return e == "*" or e.endswith(".*")


def compile_steps(df: Any, transforms: Sequence[Transform]) -> tuple[tuple[Step, ...], Any]:
    """The steps of ``transforms`` and the (empty) DataFrame they produce from ``df``."""
    steps = []
    for t in transforms:
        names: tuple[str, ...] = ()
        if t.kind in ("with", "select"):  # "expr AS name": let Spark's parser name the column
            names = tuple(df.selectExpr(e).columns[0] for e in t.exprs if not is_star(e))
        step = Step(t, names)
        df = step.apply(df)
        steps.append(step)
    return tuple(steps), df


@dataclass(frozen=True, slots=True)
class CompiledSink:
    """One sink of a topology, compiled: how to transform, aggregate and store a batch."""

    sink: PersistentAggregate | PartitionPersist
    steps: tuple[Step, ...]
    mode: Mode
    spec: MapSpec
    output: Any = field(repr=False)  # StructType of the aggregated (or rows) DataFrame
    aggregator: CombinerAggregator | None = None  # the stored value's aggregator (None for rows)
    carries_source: bool = False  # the transformed rows keep SOURCE_COLUMN (a function transform may drop it)

    @property
    def one_row_per_record(self) -> bool:
        """Whether a record yields one row at most (no function transform, no generator such as ``explode``)."""
        return one_row_per_record(self.steps)

    @property
    def is_global(self) -> bool:
        return isinstance(self.sink, PersistentAggregate) and self.sink.is_global

    @property
    def keys(self) -> tuple[str, ...]:
        s = self.sink
        return s.group_by if isinstance(s, PersistentAggregate) else s.key_columns

    @property
    def values(self) -> tuple[str, ...]:
        s = self.sink
        return tuple(a.output for a in s.stored_aggregates) if isinstance(s, PersistentAggregate) else s.value_columns

    def transform(self, records: Any) -> Any:
        for step in self.steps:
            records = step.apply(records)
        return records

    def aggregate(self, df: Any, partitions: int) -> Any:
        """The batch's result DataFrame (``output``): aggregates per key, or the rows to persist.

        Keyed results come hash-partitioned by the keys into ``partitions``, the commit tasks: a key
        lands in the same partition every txid, and the commit runs on them without another shuffle.
        Each keyed aggregate row also carries its hash partition (``COMMIT_PARTITION_COLUMN``), which
        picks its commit cache: a batch read as one Spark partition is not shuffled by key (one
        partition already satisfies the grouping), so its one task meets keys of every partition.
        """
        if self.mode is Mode.ROWS:
            return df.select(*self.keys, *self.values).repartition(partitions, *self.keys)
        result = self.grouped(df, partitions)
        return result if self.is_global else result.withColumn(COMMIT_PARTITION_COLUMN,
                                                               commit_partition(self.keys, partitions))

    def grouped(self, df: Any, partitions: int) -> Any:
        """The grouped aggregate of ``df`` before the commit-partition column (its schema is the sink's output)."""
        from pyspark.sql import functions as sf

        sink = self.sink
        if not isinstance(sink, PersistentAggregate):
            msg = f"sink {sink.name!r} keeps rows: it has no grouped aggregate"
            raise TopologyCompileError(msg)
        if self.mode is Mode.BUILTIN:
            exprs = [_builtin_expr(a) for a in sink.stored_aggregates]
            if self.is_global:
                return df.agg(*exprs, sf.count(sf.lit(1)).alias(COUNT_COLUMN))
            grouped = df.groupBy(*self.keys).agg(*exprs)  # map-side partial aggregates, one shuffle by key
            if partitions != int(df.sparkSession.conf.get("spark.sql.shuffle.partitions")):
                grouped = grouped.repartition(partitions, *self.keys)
            return grouped
        inputs = tuple(a.input for a in sink.aggregates)
        needed = list(dict.fromkeys([*self.keys, *(i for i in inputs if i is not None)]))
        aggs = tuple(a.aggregator for a in sink.aggregates)
        partial = df.select(*needed).mapInArrow(Fold(self.keys, inputs, aggs, self.output, initial=True), self.output)
        shuffled = partial.coalesce(1) if self.is_global else partial.repartition(partitions, *self.keys)
        return shuffled.mapInArrow(Fold(self.keys, self.values, aggs, self.output, initial=False), self.output)


def commit_partition(keys: Sequence[str], partitions: int) -> Any:
    """The partition a shuffle by ``keys`` into ``partitions`` sends a row to, as a column: Spark's
    HashPartitioning, ``pmod(murmur3_hash(keys, seed 42), partitions)``."""
    from pyspark.sql import functions as sf

    return sf.pmod(sf.hash(*keys), sf.lit(partitions))


def _builtin_expr(a: Agg) -> Any:
    from pyspark.sql import functions as sf

    agg = a.aggregator
    if isinstance(agg, Count):
        return sf.count(sf.lit(1)).alias(a.output)
    if a.input is None:  # only Count has no input column
        msg = f"aggregate {a.output!r} has no input column"
        raise TopologyCompileError(msg)
    col = sf.col(a.input)
    if is_stamped(a):  # the value of the newest / oldest record place (struct order: field by field)
        place = [sf.col(f"{PLACE_COLUMN}.{f}").alias(f) for f in ("timestamp", "partition", "offset")]
        stamped = sf.struct(*place, col.alias("value"))
        return (sf.min(stamped) if isinstance(agg, First) else sf.max(stamped)).alias(a.output)
    if isinstance(agg, Sum):
        return sf.coalesce(sf.sum(col), sf.lit(0)).alias(a.output)
    return (sf.min(col) if isinstance(agg, Min) else sf.max(col)).alias(a.output)


def compile_sink(records: Any, transforms: Sequence[Transform], sink: PersistentAggregate | PartitionPersist,  # noqa: C901  one sink's checks in the order a user reads them
                 partitions: int = 1) -> CompiledSink:
    """Compile one sink against ``records``, an empty DataFrame with the spout's schema."""
    from pyspark.errors import AnalysisException

    if isinstance(sink, PersistentAggregate):
        transforms = upsert_transforms(tuple(transforms), sink)
    transforms = source_transforms(tuple(transforms))
    try:
        steps, df = compile_steps(records, transforms)
    except AnalysisException as e:  # a bad expression: say which sink's stream has it
        msg = f"sink {sink.name!r}: {e.getMessage() if hasattr(e, 'getMessage') else e}"
        raise TopologyCompileError(msg) from e
    fields = {f.name: f.dataType for f in df.schema.fields}

    def typed(name: str, what: str) -> Any:
        if name not in fields:
            msg = (
                f"sink {sink.name!r}: {what} {name!r} is not a column of the stream "
                f"(columns: {', '.join(fields)})"
            )
            raise TopologyCompileError(msg)
        return fields[name]

    key_types = [(k, typed(k, "key column")) for k in (sink.group_by if isinstance(sink, PersistentAggregate)
                                                       else sink.key_columns)]
    if isinstance(sink, PartitionPersist):
        value_types = [(v, typed(v, "value column")) for v in sink.value_columns]
        mode, aggregator = Mode.ROWS, None
    else:
        for h in hidden_columns(sink):
            typed(h, "hidden column (a function transform must keep it)")
        for a in sink.stored_aggregates:
            if a.input is not None:
                typed(a.input, "aggregate input")
        mode = Mode.BUILTIN if all(type(a.aggregator) in BUILTIN for a in sink.aggregates) else Mode.FOLD
        if mode is Mode.FOLD and any(is_stamped(a) for a in sink.stored_aggregates):
            msg = (
                f"sink {sink.name!r}: latest/first cannot share a sink with a custom "
                "combiner; give them a sink of their own"
            )
            raise TopologyCompileError(msg)
        value_types = [(a.output, _value_type(a, fields)) for a in sink.stored_aggregates]
        aggregator = value_aggregator(sink.stored_aggregates)
    from pyspark.sql.types import StructField, StructType

    output = StructType([StructField(n, t, True) for n, t in (*key_types, *value_types)])
    carries = SOURCE_COLUMN in fields
    compiled = CompiledSink(sink, steps, mode, _spec(sink, key_types, value_types), output, aggregator, carries)
    if mode is Mode.BUILTIN:  # Spark's own result types (sum of an int is a bigint...)
        output = compiled.grouped(df, partitions).schema
        value_types = [(n, _unstamped_type(output[n].dataType, t)) for n, t in value_types]
        compiled = CompiledSink(sink, steps, mode, _spec(sink, key_types, value_types), output, aggregator, carries)
    return compiled


def source_transforms(transforms: tuple[Transform, ...]) -> tuple[Transform, ...]:
    """``transforms`` with the hidden :data:`SOURCE_COLUMN` added first and kept by every select.

    A row then names its source record wherever it ends up, so a row the aggregation cannot take (a
    null group-by key) is reported by its record's coordinates in the job that meets it.
    """
    out = [Transform("with", (f"{SOURCE_SQL} AS {SOURCE_COLUMN}",))]
    for t in transforms:
        keeps_all = t.kind != "select" or any(e.strip() == "*" for e in t.exprs)
        out.append(t if keeps_all else Transform("select", (*t.exprs, SOURCE_COLUMN)))
    return tuple(out)


def _unstamped_type(result: Any, declared: Any) -> Any:
    """A result column's value type: a latest/first struct's ``value`` field, else the column's own type."""
    from pyspark.sql.types import StructType

    return result["value"].dataType if isinstance(result, StructType) and not isinstance(declared, StructType) \
        else result


def _value_type(a: Agg, fields: dict[str, Any]) -> Any:
    from pyspark.sql.types import ByteType, DoubleType, FloatType, IntegerType, LongType, ShortType

    agg = a.aggregator
    if isinstance(agg, Count) or a.input is None:
        return LongType()
    t = fields[a.input]
    if isinstance(agg, Sum):
        if isinstance(t, (DoubleType, FloatType)):
            return DoubleType()
        if isinstance(t, (LongType, IntegerType, ShortType, ByteType)):
            return LongType()
        msg = f"Sum over {a.input!r} of type {t.simpleString()}: CAST it to BIGINT or DOUBLE"
        raise TopologyCompileError(msg)
    return t


def _spec(sink: PersistentAggregate | PartitionPersist, key_types: list[tuple[str, Any]],
          value_types: list[tuple[str, Any]]) -> MapSpec:
    keys = tuple(Column(n, column_type(t, f"sink {sink.name!r}: key {n!r}")) for n, t in key_types)
    if not keys:
        keys = (Column(GLOBAL_KEY_COLUMN, "text"),)
    stamped = {a.output for a in sink.stored_aggregates if is_stamped(a)} if isinstance(sink, PersistentAggregate) \
        else set()
    values = tuple(Column(n, column_type(t, f"sink {sink.name!r}: value {n!r}"), n in stamped) for n, t in value_types)
    if isinstance(sink, PartitionPersist):
        return MapSpec(sink.name, sink.factory.kind, keys, values)
    return MapSpec(sink.name, sink.factory.kind, keys, values, sink.tombstones == "delete", sink.ttl_s)
