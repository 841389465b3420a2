"""What runs on Spark executors: reading ranges, folding custom aggregates, committing to state.

Every class here is a small picklable callable for ``mapInArrow`` (Arrow batches in, Arrow batches
out). Clients are never shipped: Kafka consumers come from ``spouts.kafka``'s per-process pool and
states from :meth:`StateFactory.make_state` (opened once per Python worker process, which Spark
reuses across tasks). Executor metrics live in the worker process, so commit tasks return their
deltas (:func:`counter_snapshot`) for the driver to add to its own counters.

A keyed commit task keeps its cache in a file per commit partition in the executor's Spark work
directory (:class:`PartitionCaches`): a key belongs to the same hash partition every txid,
whichever Python worker commits it, so a stable key set meets a warm cache every txid.

A commit task that meets a fatal state error (a batch behind the state) stops and returns it in
its stats row instead of failing (:mod:`app.failures.spark_fatal`): Spark would keep only its message.

``faults`` (tests): ``faults(point, txid, batch_attempt)`` is called at ``"read"`` after each range
is read and at ``"commit"`` after a commit task's writes, before ``commit``; it may raise to fail the task
(``pyspark.TaskContext.get().attemptNumber()`` tells which attempt is running).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from app.failures.spark_fatal import CARRIED, encode
from spouts.metadata import PartitionMetadata
from states.aggregators import CombinerAggregator, combine_updater
from states.errors import StateTableMissingError
from states.factory import StateFactory
from states.spec import MapSpec

COMMIT_PARTITION_COLUMN = "_commit_partition"  # a keyed result row's hash partition (its commit cache)

TaskFaults = Callable[[str, int, int], None]
STATS_SCHEMA = pa.schema([("keys", pa.int64()), ("metrics", pa.string()), ("fatal", pa.string())])
_COUNTERS = ("cas_conflicts", "cas_unknown", "state_requests")  # Metrics attributes executors update


def spark_arrow_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` as Spark accepts it from Arrow (timestamps in microseconds, timezone kept)."""
    def conform(t: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz=t.tz)
        if pa.types.is_list(t):
            return pa.list_(conform(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(conform(f.type)) for f in t])
        return t

    return pa.schema([f.with_type(conform(f.type)) for f in schema])


@dataclass(frozen=True)
class ReadRanges:
    """Reads the planned ranges through ``spout.read_arrow``: input row ``id`` reads the ranges of ``groups[id]``.

    The ranges travel inside this (pickled) task, and the task's input is ``spark.range(len(groups))``:
    a txid's read costs the driver no column of literals per range field, and a group is one Spark
    partition, so a task reads its group's ranges one after the other (see :meth:`app.spark.reading.Reads.records`).

    Adds ``{(txid, attempt, topic, partition, first_offset): records}`` to ``counts``: a re-read of
    the same range adds the same entry again, so the count is exact however often Spark recomputes.
    ``bad`` (an accumulator) gets the range's undecodable records the same way; ``rows`` filters the
    records read (the txid's bad records left out, :mod:`app.spark.bad_record_finding`).
    """

    spout: Any
    schema: pa.Schema  # what Spark expects (spark_arrow_schema of the spout's schema)
    groups: tuple[tuple[PartitionMetadata, ...], ...]
    txid: int
    attempt: int
    counts: Any  # a pyspark Accumulator merging dicts (see executor.RangeCounts)
    faults: TaskFaults | None = None
    bad: Any = None  # a pyspark Accumulator merging dicts (app.spark.bad_record_finding.SeenBadRecords)
    rows: Callable[[Any, pa.RecordBatch], pa.RecordBatch] | None = None
    columns: tuple[str, ...] | None = None  # the spout's columns to read (None: all)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            for meta in (m for i in rb.column("id").to_pylist() for m in self.groups[i]):
                n, found = 0, list[Any]()
                for read in self.spout.read_arrow(meta, on_bad=found.append, columns=self.columns):
                    b = read if self.rows is None else self.rows(meta, read)
                    n += b.num_rows
                    yield b if b.schema.equals(self.schema) else b.cast(self.schema)
                if self.faults is not None:
                    self.faults("read", self.txid, self.attempt)
                key = (self.txid, self.attempt, meta.topic, meta.partition, meta.first_offset)
                if self.counts is not None:
                    self.counts.add({key: n})
                if self.bad is not None:
                    self.bad.add({key: tuple(found)})


@dataclass(frozen=True)
class Fold:
    """A Python fold per key, for custom combiners: ``init`` then ``combine`` (``initial``), or ``combine`` only.

    Reads key columns ``keys`` and one input column per aggregator (None: no input, as Count);
    writes ``keys`` + one partial per aggregator with the sink's output schema (a Spark StructType).
    """

    keys: tuple[str, ...]
    inputs: tuple[str | None, ...]
    aggregators: tuple[CombinerAggregator, ...]
    output: Any
    initial: bool

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        aggs = self.aggregators
        for rb in batches:
            n = rb.num_rows
            key_rows = zip(*(rb.column(k).to_pylist() for k in self.keys), strict=True) if self.keys else repeat((), n)
            cols = [rb.column(i).to_pylist() if i is not None else repeat(None, n) for i in self.inputs]
            for key, *values in zip(key_rows, *cols, strict=True):
                v = tuple(a.init(x) for a, x in zip(aggs, values, strict=True)) if self.initial else tuple(values)
                old = acc.get(key)
                acc[key] = v if old is None else tuple(a.combine(p, q) for a, p, q in zip(aggs, old, v, strict=True))
        if acc:
            yield self._batch(acc)

    def _batch(self, acc: dict[tuple[Any, ...], tuple[Any, ...]]) -> pa.RecordBatch:
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.output, timezone="UTC")
        keys, values = list(acc), list(acc.values())
        columns = [list(c) for c in zip(*keys, strict=True)] + [list(c) for c in zip(*values, strict=True)]
        return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def counter_snapshot() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """This process's values of the counters executors update, by (Metrics attribute, labels)."""
    from app.metrics import METRICS

    snap = {}
    for attr in _COUNTERS:
        for metric in getattr(METRICS, attr).collect():
            for s in metric.samples:
                if s.name.endswith("_total"):
                    snap[(attr, tuple(sorted(s.labels.items())))] = s.value
    return snap


def counter_deltas(before: dict[Any, float]) -> str:
    """JSON ``[[attribute, labels, delta], ...]`` of what changed since ``before``."""
    after = counter_snapshot()
    return json.dumps([[attr, dict(labels), v - before.get((attr, labels), 0.0)]
                       for (attr, labels), v in after.items() if v != before.get((attr, labels), 0.0)])


def _stats(keys: int, before: dict[Any, float], fatal: str | None = None) -> pa.RecordBatch:
    """A commit task's one output row; ``fatal`` is an :mod:`app.failures.spark_fatal` record that stopped it."""
    return pa.RecordBatch.from_arrays([pa.array([keys], pa.int64()), pa.array([counter_deltas(before)]),
                                       pa.array([fatal], pa.string())], schema=STATS_SCHEMA)


class Seed(NamedTuple):
    """What a commit task's cache starts from: the entries of its partitions' files and their estimate of
    absent misses (None: no evidence)."""

    entries: list[tuple[Any, Any]]
    absent_rate: float | None


class PartitionCaches:
    """The caches of the commit partitions a task's keys belong to, each kept in a file between txids.

    A key's commit partition is its hash partition (``COMMIT_PARTITION_COLUMN``), whichever task
    commits it: Python workers are reused but get a different task each txid, and a batch read as
    one Spark partition commits every key in one task. The files (in the executor's Spark work
    directory, shared by its workers, gone with the application) hand each partition's cache to
    whichever worker commits its keys next. A task holds the keys it commits (never evicted before
    the next txid) and at least ``cache_size``.

    Each file names the txid it was saved after. On a cluster each executor has a work directory of
    its own, and Spark may run a partition's commit on another executor than last time: that
    executor's file is then older than the partition's last commit, and its entries would cost a
    failed LWT per key. A file is used only when saved by the sink's previous commit (or an earlier
    attempt of this txid); any other is cold, and the keys are read in one batched read.

    Each file also keeps the cache's estimate of absent misses (:class:`~states.cached.CasCachedMap`):
    a chain of files that began cold holds only the keys seen since, not the partition's, so the
    next task goes on reading its misses while they are found stored (a key committed on another
    executor before), instead of guessing them new at a failed LWT each.
    """

    def __init__(self, factory: StateFactory, spec: MapSpec, partitions: int, parts: Iterable[int]) -> None:
        from pyspark import SparkFiles

        digest = hashlib.sha256(repr((factory, spec)).encode()).hexdigest()[:16]
        root = Path(SparkFiles.getRootDirectory(), "trident-commit-caches")
        self.paths = {p: root / f"{spec.table}-{digest}-{partitions}-{p}.pickle" for p in sorted(set(parts))}
        self._loaded: dict[Any, int] = {}  # key -> partition, for entries loaded from several files

    @classmethod
    def of(cls, factory: StateFactory, spec: MapSpec, partitions: int, parts: set[int]) -> PartitionCaches | None:
        """The caches of ``parts`` (this task's partition when no row says; None outside a Spark task)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None or partitions < 1:
            return None
        return cls(factory, spec, partitions, parts or {ctx.partitionId()})

    def load(self, valid: Collection[int]) -> Seed:
        """The entries of every file saved after one of the ``valid`` txids (a missing, unreadable or older
        file has none), and their estimate of absent misses (None, no evidence, when any file is cold)."""
        entries: list[tuple[Any, Any]] = []
        rates: list[float | None] = []
        for part, path in self.paths.items():
            try:
                with path.open("rb") as f:
                    saved = pickle.load(f)  # noqa: S301, RUF100  this module's own cache file, in Spark's work directory
            except (OSError, EOFError, pickle.UnpicklingError):
                rates.append(None)
                continue
            if not (isinstance(saved, tuple) and len(saved) == 3 and saved[0] in valid):
                rates.append(None)  # older than the partition's last commit (it ran elsewhere since): cold
                continue
            _, loaded, rate = saved
            if len(self.paths) > 1:
                self._loaded.update((k, part) for k, _ in loaded)
            entries += loaded
            rates.append(rate)
        known = [r for r in rates if r is not None]
        return Seed(entries, min(known) if known and len(known) == len(rates) else None)

    def save(self, txid: int, entries: list[tuple[Any, Any]], parts: dict[Any, int],
             absent_rate: float | None) -> None:
        """Each entry to its partition's file, saved after ``txid`` with the cache's ``absent_rate``: ``parts``
        (this txid's keys) or the file it came from."""
        if len(self.paths) == 1:
            self._write(next(iter(self.paths.values())), txid, entries, absent_rate)
            return
        split: dict[int, list[tuple[Any, Any]]] = {p: [] for p in self.paths}
        for key, value in entries:
            part = parts.get(key, self._loaded.get(key))
            if part in split:
                split[part].append((key, value))
        for part, mine in split.items():
            self._write(self.paths[part], txid, mine, absent_rate)

    @staticmethod
    def _write(path: Path, txid: int, entries: list[tuple[Any, Any]], absent_rate: float | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as f:
            pickle.dump((txid, entries, absent_rate), f, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(path)  # a racing attempt of the same partition: the last one wins


class DriverCache:
    """A keyed sink's cache between commits on the driver (:mod:`app.spark.committing`), in memory: the
    :class:`PartitionCaches` interface, one entry list saved after one txid."""

    def __init__(self) -> None:
        self.paths: dict[int, Path] = {}  # no files: all the sink's keys are in one list
        self.saved: tuple[int, list[tuple[Any, Any]], float | None] | None = None

    def load(self, valid: Collection[int]) -> Seed:
        """The entries saved after one of the ``valid`` txids (else none, and no evidence)."""
        if self.saved is None or self.saved[0] not in valid:
            return Seed([], None)
        return Seed(list(self.saved[1]), self.saved[2])

    def save(self, txid: int, entries: list[tuple[Any, Any]], parts: dict[Any, int],
             absent_rate: float | None) -> None:
        """Keep ``entries`` as saved after ``txid``."""
        self.saved = (txid, entries, absent_rate)


@dataclass(frozen=True)
class CommitAggregates:
    """Applies one task's aggregated rows to the sink's map state: begin, one ``multi_update``, commit.

    One call for all the task's keys: over Cassandra its reads and LWTs share one bounded window
    across the task (:mod:`states.pipeline`), with no barrier between keys read and keys written.
    ``partitions``: the number of commit partitions; > 0 keeps :class:`PartitionCaches`.
    ``previous``: the txid of the sink's previous commit by this driver (None: unknown, ``txid - 1``
    assumed); a cache file saved after another is older than the partition's state.
    ``committed``: the last txid committed into the table (0: none, the table may be created).
    ``driver_cache``: run on the driver, the sink's cache between the driver's commits (a task keeps its
    partitions' files).
    """

    factory: StateFactory
    spec: MapSpec
    aggregator: CombinerAggregator
    txid: int
    attempt: int
    faults: TaskFaults | None = field(default=None, kw_only=True)
    partitions: int = field(default=0, kw_only=True)
    previous: int | None = field(default=None, kw_only=True)
    committed: int = field(default=0, kw_only=True)
    driver_cache: DriverCache | None = field(default=None, kw_only=True)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        before = counter_snapshot()
        key_names = [c.name for c in self.spec.key]
        value_names = [c.name for c in self.spec.value]
        keys: list[tuple[Any, ...]] = []
        values: list[Any] = []
        part_columns: list[pa.Array] = []
        for rb in batches:
            keys += zip(*(rb.column(k).to_pylist() for k in key_names), strict=True)
            values += _values(rb, value_names)
            if COMMIT_PARTITION_COLUMN in rb.schema.names:
                part_columns.append(rb.column(COMMIT_PARTITION_COLUMN))
        parts = pa.chunked_array(part_columns) if part_columns else None
        written, fatal = 0, None
        try:
            files: PartitionCaches | DriverCache | None = self.driver_cache or PartitionCaches.of(
                self.factory, self.spec, self.partitions, set(parts.unique().to_pylist()) if parts is not None else set())
            previous = self.txid - 1 if self.previous is None else self.previous
            seed = files.load({previous, self.txid}) if files else Seed([], None)
            state, cache = self.factory.make_cached_state(self.spec, seed.entries,
                                                          max(len(keys), len(seed.entries)), seed.absent_rate,
                                                          committed_txid=self.committed)
            state.begin_commit(self.txid)
            if keys:
                state.multi_update(keys, [combine_updater(self.aggregator, v) for v in values])
            written = len(keys)
            if self.faults is not None:
                self.faults("commit", self.txid, self.attempt)
            state.commit(self.txid)
            if files is not None and cache is not None:
                # a key's own partition is needed only when the task's keys span several (one range)
                files.save(self.txid, cache.entries(), dict(zip(keys, parts.to_pylist(), strict=True))
                           if parts is not None and len(files.paths) > 1 else {}, cache.absent_rate)
        except CARRIED as e:  # stop writing; the driver raises it again (app.failures.spark_fatal)
            fatal = encode(_carried(e, self.factory, self.spec, self.txid))
        yield _stats(written, before, fatal)


@dataclass(frozen=True)
class PersistRows:
    """A ``partition_persist`` task: ``updater(state, rows)`` with all of this task's rows (dicts)."""

    factory: StateFactory
    spec: MapSpec
    updater: Callable[[Any, list[dict[str, Any]]], None]
    txid: int
    attempt: int
    faults: TaskFaults | None = None
    committed: int = 0  # the last txid committed into the table (0: none, the table may be created)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        before = counter_snapshot()
        rows = [r for rb in batches for r in rb.to_pylist()]
        fatal = None
        try:
            state = self.factory.make_state(self.spec, committed_txid=self.committed)
            state.begin_commit(self.txid)
            if rows:
                self.updater(state, rows)
            if self.faults is not None:
                self.faults("commit", self.txid, self.attempt)
            state.commit(self.txid)
        except CARRIED as e:  # stop; the driver raises it again (app.failures.spark_fatal)
            fatal = encode(_carried(e, self.factory, self.spec, self.txid))
        yield _stats(len(rows), before, fatal)


def _carried(error: BaseException, factory: StateFactory, spec: MapSpec, txid: int) -> BaseException:
    """``error`` as the driver gets it: a missing table names the last committed txid (``txid - 1``: commits are
    in order), and this process forgets the state opened on it (the next open checks the table again)."""
    if not isinstance(error, StateTableMissingError):
        return error
    factory.forget(spec)
    return error.after(txid - 1)


def _values(rb: pa.RecordBatch, names: Sequence[str]) -> list[Any]:
    if len(names) == 1:
        return list(rb.column(names[0]).to_pylist())
    return list(zip(*(rb.column(n).to_pylist() for n in names), strict=True))
