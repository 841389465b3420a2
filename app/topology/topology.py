"""The topology API, in Trident's spirit: a stream from a spout, transforms, persistent aggregates.

    topology = Topology("word-count")
    words = (topology.new_stream(spout)
             .map("CAST(value AS STRING) AS line")
             .map("explode(split(line, ' ')) AS word")
             .filter("word <> ''"))
    counts = words.group_by("word").persistent_aggregate(state, Count(), output="count")

A topology is plain data (picklable): Spark executes it (``app.spark``), and the YAML config
compiles to the same objects (``app.config``). Transforms must be deterministic: a replayed txid
must compute the same result from the same records.

Records enter as columns ``topic, partition, offset, timestamp, key, value, headers``.

``Topology(name, errors=ErrorPolicy.dead_letter("topic"))`` says what happens to a record the
pipeline cannot decode, transform or store (:mod:`app.bad_records.error_policy`; default: fail).
``Latest``/``First`` aggregates also see each row's record place, carried through the transforms
(:mod:`app.topology.upserts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from app.bad_records.error_policy import ErrorPolicy
from app.topology.steps import Agg, Transform
from app.topology.upserts import check_sink, stored_aggregates
from spouts.protocols import PartitionedSpout
from states.aggregators import CombinerAggregator
from states.factory import StateFactory
from states.spec import check_identifier

__all__ = ["Agg", "GroupedStream", "PartitionPersist", "PersistentAggregate", "SinkT", "Stream", "Topology",
           "Transform"]


@dataclass(frozen=True, slots=True)
class PersistentAggregate:
    """``group_by(keys).persistent_aggregate(...)``; no keys means a global aggregate (one row).

    ``tombstones`` says what a record with a null value does: None, it is aggregated like any
    other; ``ignore``, it is skipped; ``delete``, it deletes its key (every aggregate must then be
    ``Latest``: the key reads as absent until a newer record comes, see :mod:`app.topology.upserts`).
    ``ttl_s``: rows expire that long after their key's last write (Cassandra only).
    """

    name: str  # the state's table
    factory: StateFactory
    group_by: tuple[str, ...]
    aggregates: tuple[Agg, ...]
    tombstones: str | None = None
    ttl_s: int | None = None

    def __post_init__(self) -> None:
        check_sink(self)

    @property
    def is_global(self) -> bool:
        return not self.group_by

    @property
    def stored_aggregates(self) -> tuple[Agg, ...]:
        """The aggregates the table stores: the user's, then the tombstone flag when tombstones delete."""
        return stored_aggregates(self)


@dataclass(frozen=True, slots=True)
class PartitionPersist:
    """``partition_persist``: ``updater(state, rows)`` applies each commit task's rows (a list of dicts)."""

    name: str
    factory: StateFactory
    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    updater: Callable[[Any, list[dict[str, Any]]], None]


#: A sink a stream ends in: the kind ``Topology.attach`` hands back.
SinkT = TypeVar("SinkT", "PersistentAggregate", "PartitionPersist")


@dataclass(frozen=True, slots=True)
class Stream:
    """An immutable chain of transforms on one spout's records; each method returns a new stream."""

    topology: Topology
    transforms: tuple[Transform, ...] = ()

    def map(self, *exprs: str) -> Stream:
        """Replace the columns with Spark SQL expressions (``selectExpr``); ``explode`` flat-maps."""
        return self._then(Transform("select", exprs))

    def each(self, *exprs: str) -> Stream:
        """Append columns computed by Spark SQL expressions (``expr AS name``)."""
        return self._then(Transform("with", exprs))

    def filter(self, predicate: str) -> Stream:
        return self._then(Transform("filter", (predicate,)))

    def apply(self, function: Callable[[Any], Any]) -> Stream:
        """Any deterministic ``DataFrame -> DataFrame`` function."""
        return self._then(Transform("function", function=function))

    def group_by(self, *fields: str) -> GroupedStream:
        if not fields:
            msg = "group_by needs at least one field"
            raise ValueError(msg)
        for f in fields:
            check_identifier(f, "group-by field")
        return GroupedStream(self, tuple(fields))

    def persistent_aggregate(self, factory: StateFactory, aggregates: CombinerAggregator | Sequence[Agg], *,
                             output: str | None = None, input: str | None = None, name: str,  # noqa: A002  the keyword of Agg.input
                             tombstones: str | None = None, ttl_s: int | None = None) -> PersistentAggregate:
        """A global aggregate (no grouping) into a snapshottable state, in table ``name``."""
        return self.topology.attach(PersistentAggregate(check_identifier(name, "table name"), factory, (),
                                                      _aggs(aggregates, output, input), tombstones, ttl_s), self)

    def partition_persist(self, factory: StateFactory, key_columns: Sequence[str], value_columns: Sequence[str],
                          updater: Callable[[Any, list[dict[str, Any]]], None], *, name: str) -> PartitionPersist:
        return self.topology.attach(PartitionPersist(check_identifier(name, "table name"), factory,
                                                   tuple(key_columns), tuple(value_columns), updater), self)

    def _then(self, t: Transform) -> Stream:
        return Stream(self.topology, (*self.transforms, t))


@dataclass(frozen=True, slots=True)
class GroupedStream:
    stream: Stream
    fields: tuple[str, ...]

    def persistent_aggregate(self, factory: StateFactory, aggregates: CombinerAggregator | Sequence[Agg], *,
                             output: str | None = None, input: str | None = None,  # noqa: A002  the keyword of Agg.input
                             name: str | None = None, tombstones: str | None = None,
                             ttl_s: int | None = None) -> PersistentAggregate:
        """Keyed aggregates into a map state; table ``name`` (default: the topology's name + the fields).

        ``tombstones`` and ``ttl_s``: see :class:`PersistentAggregate`.
        """
        table = name or "_".join((self.stream.topology.name.replace("-", "_"), *self.fields))
        sink = PersistentAggregate(check_identifier(table, "table name"), factory, self.fields,
                                   _aggs(aggregates, output, input), tombstones, ttl_s)
        return self.stream.topology.attach(sink, self.stream)


@dataclass(eq=False)
class Topology:
    """One spout, its streams and their sinks; ``name`` is the topology id (where it resumes from)."""

    name: str
    spout: PartitionedSpout | None = None
    sinks: list[tuple[Stream, PersistentAggregate | PartitionPersist]] = field(default_factory=list)
    errors: ErrorPolicy = field(default_factory=ErrorPolicy)  # what a bad record does (app.bad_records.error_policy)

    def source(self) -> PartitionedSpout:
        """The spout the topology reads (set by :meth:`new_stream`)."""
        if self.spout is None:
            msg = f"topology {self.name!r} has no stream, so no spout to read"
            raise ValueError(msg)
        return self.spout

    def new_stream(self, spout: PartitionedSpout) -> Stream:
        if self.spout is not None and self.spout is not spout:
            msg = "a topology reads one spout; make another topology for another source"
            raise ValueError(msg)
        self.spout = spout
        return Stream(self)

    def attach(self, sink: SinkT, stream: Stream) -> SinkT:
        """Add ``sink``, fed by ``stream``, to this topology (what a stream's terminal methods call)."""
        if any(s.name == sink.name for _, s in self.sinks):
            msg = f"two sinks write table {sink.name!r}"
            raise ValueError(msg)
        if not sink.factory.pipeline:  # the metrics its states record carry this topology's id
            sink = replace(sink, factory=replace(sink.factory, pipeline=self.name))
        self.sinks.append((stream, sink))
        return sink


def _aggs(aggregates: CombinerAggregator | Sequence[Agg], output: str | None, column: str | None) -> tuple[Agg, ...]:
    if isinstance(aggregates, Sequence):
        if output or column:
            msg = "give output/input per Agg when passing several aggregates"
            raise ValueError(msg)
        if not aggregates:
            msg = "persistent_aggregate needs at least one aggregate"
            raise ValueError(msg)
        return tuple(aggregates)
    return (Agg(aggregates, output or aggregates.name, column),)
