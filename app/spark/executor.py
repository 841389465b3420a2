"""SparkExecutor: the batch protocol's process and commit steps as Spark jobs.

    spark = spark_session()
    executor = SparkExecutor(spark, topology)
    coordinator = Coordinator(topology.name, topology.spout, executor, store, config)

**process(batch)** (no state is touched):

1. ``spark.range(n, numPartitions=n)`` for the plan's n non-empty ranges: each range is one Spark
   partition (row ``id`` stands for the range; the ranges travel in the pickled read task).
2. ``mapInArrow`` calls ``spout.read_arrow(meta)`` on executors: the records, in the spout's
   schema. Records read are counted by an accumulator keyed by range (exact under recomputation).
3. Each sink's transforms, then its aggregation (:mod:`app.spark.plan`): Spark's count/sum/min/max,
   or a Python fold for custom combiners; a global aggregate is collected to the driver (one row).
4. The result is persisted and materialised (one job per keyed sink: an RDD count of the cached
   plan, which also gives the number of keys; no count aggregate, so no extra stage). With several
   sinks the records are persisted too, so Kafka is read once.
   If Spark loses a cached block it recomputes it from the same frozen ranges: deterministic.
   A keyed result comes out of the aggregation already hash-partitioned by its keys into the commit
   partitions (:meth:`CompiledSink.aggregate`).

**commit(batch, processed)**:

1. Keyed sinks: ``mapInArrow`` over the persisted result's partitions (no shuffle: one stage, one
   task per commit partition; a key meets its partition's cache every txid, even in a txid read
   as one Spark partition, which is not shuffled by key). The tasks open the
   state once per worker process, ``begin_commit``, one ``multi_update`` of all its keys
   with ``combine_updater`` (one bounded request window across the task), ``commit``, and return one stats row (keys written, metric deltas for the
   driver, and the fatal state error that stopped the task, if any: the driver raises it, see
   :mod:`app.spark.fatal`).
2. Global sinks: on the driver, through a ``SnapshottableMap`` (one key, one value).
3. ``partition_persist`` sinks: tasks call the user's updater with their rows.
4. The persisted results are unpersisted (in every case: a failed commit is replayed from process).

So a txid of one keyed sink is two Spark jobs: process (read and partial aggregates, shuffle by key,
final aggregates cached and counted: two stages) and commit (one stage). The plan is frozen between
them, before the commit job starts: the batch protocol's order holds (adaptive query execution is off,
see :mod:`app.spark.session`, or every shuffle stage would be a job of its own).

A failed task is retried by Spark (``local[N,F]``, see :mod:`app.spark.session`); a failed job
raises, and the coordinator replays the txid. Where the transforms are SQL without a generator, the
process job runs them in the error-capturing form (:mod:`app.spark.capture`): a record they fail on
is a row marked and left out in the same job (:mod:`app.spark.bad_records`), never a failed task, so
a dirty txid costs the clean one's jobs and one more that names the errors. Jobs carry the job group ``<topology>:txid-<N>``
(``cancel(txid)``) and run in scheduler pool ``process`` or ``commit``: with ``max_pending > 1``
the coordinator processes N+1 in a worker thread while committing N, and both share executors.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.accumulators import AccumulatorParam

from app.batch import Batch, CommitStats
from app.error_policy import Action
from app.masters import state_refusal
from app.metrics import METRICS, Metrics
from app.spark import bad_records as bad_records_
from app.spark import capture as capture_
from app.spark import executors as executors_
from app.spark import fatal, warmup
from app.spark import parallelism as parallelism_
from app.spark.isolation import Isolation
from app.spark.jvm import gateway, java_frame, java_session
from app.spark.plan import COUNT_COLUMN, SOURCE_COLUMN, CompiledSink, Mode, compile_sink, register_spec
from app.spark.state_tables import StateTables
from app.spark.tasks import (
    STATS_SCHEMA,
    CommitAggregates,
    PersistRows,
    ReadRanges,
    TaskFaults,
    spark_arrow_schema,
)
from app.topology import PartitionPersist, Topology
from app.upserts import PLACE_COLUMN
from spouts.bad_records import BadRecord, Stage
from spouts.metadata import BatchPlan, PartitionMetadata
from spouts.protocols import ArrowSpout
from states.aggregators import combine_updater
from states.errors import StateTableMissingError
from states.snapshottable import SnapshottableMap
from states.spec import MapSpec, StateKind

log = logging.getLogger(__name__)



class RangeCounts(AccumulatorParam[dict[Any, int]]):
    """Merges ``{range: records}`` dicts; a range counted twice (a recomputed task) keeps one entry."""

    def zero(self, value: dict[Any, int]) -> dict[Any, int]:
        return {}

    def addInPlace(self, a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:
        a.update(b)
        return a


@dataclass(frozen=True)
class SinkResult:
    """One sink's share of a processed batch: the persisted result, or a global aggregate's partial."""

    compiled: CompiledSink
    frame: Any = None  # persisted DataFrame (keyed and partition_persist sinks)
    keys: int = 0  # rows in ``frame``, or 1 when a global partial exists
    partial: Any = None  # global aggregates: the combined value (scalar or tuple), None if no rows


@dataclass(frozen=True)
class SparkBatch:
    """What ``process`` hands to ``commit``: the txid it was made for, records read, each sink's result."""

    txid: int
    attempt: int
    records: int
    sinks: tuple[SinkResult, ...]
    bad_records: tuple[BadRecord, ...] = ()  # left out of ``sinks``; the error policy settles them
    commit_partitions: int = 1  # what the keyed results were partitioned into (the commit tasks' caches)


@dataclass(frozen=True)
class Observed:
    """The names of a sink's observations in its process job (None: not observed)."""

    null_keys: str | None = None
    transform_errors: str | None = None


@dataclass
class Found:
    """The rows a process run left out: null-key records, and records a transform failed on (by sink and
    expression index, from the error-capturing form)."""

    null_keys: list[BadRecord] = field(default_factory=list)
    failed: dict[Any, tuple[CompiledSink, int]] = field(default_factory=dict)

    def add(self, c: CompiledSink, df: Any, observed: Observed) -> None:
        """Take what ``observed`` saw while ``df`` (materialised or collected) ran."""
        if observed.null_keys is not None:
            self.null_keys.extend(bad_records_.null_key_records(df, observed.null_keys, c.keys, c.sink.name,
                                                                c.sink.factory.key_limits(c.spec)))
        if observed.transform_errors is not None:
            for coords, k in bad_records_.failed_expressions(df, observed.transform_errors).items():
                self.failed.setdefault(coords, (c, k))


class SparkExecutor:
    """Runs a :class:`~app.topology.Topology`'s batches on Spark (the BatchExecutor protocol).

    ``spark``: a SparkSession (:func:`app.spark.session.spark_session`). The topology's spout must
    be an :class:`~spouts.protocols.ArrowSpout` (KafkaSpout is): picklable, read on executors with
    ``read_arrow(meta)`` in its ``arrow_schema``.
    ``commit_partitions``: commit tasks per keyed sink (default: Spark's default parallelism; when it
    differs from ``spark.sql.shuffle.partitions`` set by the user, the aggregate is shuffled once
    more in process, still in the same job; left unset, the shuffle partitions follow the commit tasks).
    ``read_tasks``: read tasks per txid at most (default: the executors' cores); a txid's ranges are
    packed into that many groups of about equal records (:func:`pack_ranges`).
    Counts not given follow the executors: chosen again before every txid (:mod:`app.spark.parallelism`).
    ``faults``: a picklable test hook run on executors (see :mod:`app.spark.tasks`).
    ``metrics``: where executors' metric deltas (CAS conflicts, unknown outcomes, requests) go.
    """

    def __init__(self, spark: Any, topology: Topology, *, commit_partitions: int | None = None,
                 read_tasks: int | None = None, faults: TaskFaults | None = None, metrics: Metrics = METRICS) -> None:
        spout = topology.spout
        if not isinstance(spout, ArrowSpout):
            raise ValueError(f"topology {topology.name!r}: Spark reads a spout with read_arrow and arrow_schema "
                             f"(spouts.protocols.ArrowSpout), not {type(spout).__name__}")
        master = spark.sparkContext.master
        for _, sink in topology.sinks:
            if not sink.factory.shared_across_processes:
                raise ValueError(f"sink {sink.name!r}: the {sink.factory.backend} backend lives in one process; Spark "
                                 "executors need one every executor process opens (sqlite on a local master, "
                                 "cassandra on any)")
            refusal = state_refusal(sink.factory.backend, master)
            if refusal is not None:
                raise ValueError(f"sink {sink.name!r}: {refusal}")
        self.spark, self.topology, self.spout = spark, topology, spout
        self.faults, self.metrics = faults, metrics
        self._given = (read_tasks, commit_partitions)
        self._keep_shuffle = parallelism_.user_shuffle_partitions(spark)
        self.parallelism: parallelism_.Parallelism | None = None
        self.read_tasks, self.commit_partitions = 1, 1  # chosen by _follow_executors, now and before every txid
        self._follow_executors()
        self.arrow_schema = spark_arrow_schema(spout.arrow_schema)
        from pyspark.sql.pandas.types import from_arrow_schema

        self.records_schema = from_arrow_schema(self.arrow_schema, prefer_timestamp_ntz=False)
        self._stats_schema = from_arrow_schema(STATS_SCHEMA)
        self.sinks = self._compile()
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], SparkBatch] = {}  # persisted results not yet released
        self._counts = spark.sparkContext.accumulator({}, RangeCounts())
        self._bad = spark.sparkContext.accumulator({}, bad_records_.SeenBadRecords())
        self._isolated: dict[tuple[Any, ...], list[BadRecord]] = {}  # ranges -> records the transforms fail on
        self.isolating: Isolation | None = None  # the isolation running now (its status is a /readyz reason)
        self._last_commit: dict[str, int] = {}  # keyed sink -> the txid its last commit job finished
        self.tables = StateTables(self.sinks)  # which tables a txid may create, which must be there

    @property
    def problem(self) -> str | None:
        """What holds this executor up now, for ``/readyz``: bad records being isolated, or no Spark executor
        for longer than the bound (:mod:`app.spark.executors`)."""
        isolating = self.isolating
        return isolating.status if isolating is not None else executors_.problem(self.spark)

    def _compile(self) -> tuple[CompiledSink, ...]:
        empty = self.spark.createDataFrame([], self.records_schema)
        compiled = tuple(compile_sink(empty, stream.transforms, sink, self.commit_partitions)
                         for stream, sink in self.topology.sinks)
        for c in compiled:
            register_spec(c.sink, c.spec)
        return compiled

    # -- BatchExecutor ------------------------------------------------------------------------

    def state_kinds(self) -> list[StateKind]:
        return [sink.factory.kind for _, sink in self.topology.sinks]

    def spec(self, name: str) -> MapSpec:
        """The table spec of the sink writing table ``name``."""
        for c in self.sinks:
            if c.sink.name == name:
                return c.spec
        raise KeyError(name)

    def process(self, batch: Batch) -> SparkBatch:
        """Read, transform and pre-aggregate ``batch``'s ranges; persist the results (no state write)."""
        self._release(lambda txid, attempt: txid >= batch.txid)  # earlier attempts of this and later txids failed
        self._follow_executors()
        partitions = self.commit_partitions
        ranges = [m for m in batch.plan if not m.empty]
        if not ranges:
            return SparkBatch(batch.txid, batch.attempt, 0, ())
        key = tuple((m.topic, m.partition, m.first_offset, m.next_offset) for m in ranges)
        failing = self._isolated.get(key)  # a replay of the same ranges meets the same bad records
        if failing is None:
            failing = _stored_isolation(batch, key)
        known = bool(failing)
        with self._job(batch, "process"):
            try:
                if not failing and self._capturable():
                    # a record the transforms fail on is a row marked in the same job, never a failed task
                    results, found, failing = self._captured(batch, ranges)
                else:  # a function transform, or a replay without the known bad records: the plain form
                    results, found = self._process_records(
                        self.read_records(batch, ranges, bad_records_.leave_out_filter(failing)))
            except Exception as e:
                if failing or self._capturable() or bad_records_.record_error(e) is None:
                    raise  # transient, or not a record's fault (the capturing form found none): retried whole
                results, found, failing = self._without_failing(batch, ranges, e)
            if failing and not known:  # isolated now: kept for a replay, here and in the txid's progress
                self._isolated = {**dict(list(self._isolated.items())[-15:]), key: failing}
                _store_isolation(batch, key, failing)
            null_keys = found.null_keys
            if null_keys and not self._rows_left_out_alone():
                # another row of a null-key record (another sink's, or a second row of the record) may be
                # in a result: run the txid once more without those records
                _unpersist(results)
                results, _ = self._process_records(
                    self.read_records(batch, ranges, bad_records_.leave_out_filter([*failing, *null_keys])))
        counted, undecodable = self._take_counts(batch), self._take_bad(batch)
        bad = tuple(undecodable) + tuple(failing) + tuple(null_keys)
        processed = SparkBatch(batch.txid, batch.attempt, counted, tuple(results), bad, partitions)
        with self._lock:
            self._held[(batch.txid, batch.attempt)] = processed
        return processed

    def commit(self, batch: Batch, processed: SparkBatch) -> CommitStats:
        """Apply ``processed`` to every sink's state as txid ``batch.txid``."""
        if processed.txid != batch.txid:
            raise ValueError(f"commit of txid {batch.txid} given the result of txid {processed.txid}")
        try:
            with self._job(batch, "commit"):
                self.tables.create(batch)
                keys = sum(self._commit_sink(r, batch, processed.commit_partitions) for r in processed.sinks)
        finally:
            self._release(lambda txid, attempt: txid <= batch.txid)
        return CommitStats(processed.records, keys)

    def cancel(self, txid: int) -> None:
        """Cancel the running Spark jobs of ``txid`` (the job raises; the coordinator replays)."""
        self.spark.sparkContext.cancelJobGroup(self._group(txid))

    def close(self) -> None:
        """Release every persisted result (the session stays: it may be shared)."""
        self._release(lambda txid, attempt: True)

    def warm_up(self, plan: BatchPlan) -> int:
        """Pay a cold first txid's costs while a standby waits (:mod:`app.spark.warmup`); writes nothing.
        Returns how many commit tasks opened a state."""
        return warmup.warm_up(self, plan)

    # -- process ------------------------------------------------------------------------------

    def _process_records(self, records: Any, *, capture: bool = False) -> tuple[list[SinkResult], Found]:
        """Each sink's result, and the records left out of them (found in the same jobs): rows with a null
        group-by key, and (``capture``: the transforms in the error-capturing form) rows they fail on."""
        several = len(self.sinks) > 1
        if several:
            records = records.persist()
        results: list[SinkResult] = []
        found = Found()
        try:
            for c in self.sinks:
                results.append(self._process_sink(c, records, found, capture))
            if not self.sinks:
                _materialise(records)
        except BaseException:
            _unpersist(results)  # nobody will commit them
            raise
        finally:
            if several:
                records.unpersist()
        return results, found

    def _rows_left_out_alone(self) -> bool:
        """Whether leaving out a bad row leaves out its whole record: one sink, one row per record."""
        return len(self.sinks) == 1 and self.sinks[0].one_row_per_record

    def keyed_rows(self, c: CompiledSink, records: Any, capture: bool = False) -> tuple[Any, Observed]:
        """``c``'s transformed rows without null keys or keys the state refuses (and the observations naming the
        rows left out), or, when its rows lost their source coordinates, rows that fail on such a key (then found
        by bisection).
        ``capture``: the transforms in the error-capturing form, failed rows left out too."""
        if capture:
            rows, errors = bad_records_.split_transform_errors(capture_.capture(records, c.steps), c.sink.name,
                                                               SOURCE_COLUMN, capture_.ERROR_COLUMN)
        else:
            rows, errors = c.transform(records), None
        limits = c.sink.factory.key_limits(c.spec) if c.keys else None  # keys the state refuses: bad records too
        if c.keys and c.carries_source:
            rows, null_keys = bad_records_.split_null_keys(rows, c.keys, c.sink.name, SOURCE_COLUMN, limits)
            return rows, Observed(null_keys, errors)
        return bad_records_.guard_keys(rows, c.keys, c.sink.name, limits), Observed(None, errors)

    def _capturable(self) -> bool:
        """Whether every sink's transforms run in the error-capturing form (:mod:`app.spark.capture`)."""
        return all(capture_.capturable(c.steps) and c.carries_source for c in self.sinks)

    def _without_failing(self, batch: Batch, ranges: list[Any],
                         error: Exception) -> tuple[list[SinkResult], Found, list[BadRecord]]:
        """After a record error of a sink whose transforms cannot run in the error-capturing form (a Python
        function, a generator): the txid's results without the records they fail on, found by bisection, and
        those."""
        iso = self._isolation(batch, ranges)
        try:
            failing = self._isolate(batch, ranges, iso)
            if not failing:
                raise error
            iso.done(failing)
            results, found = self._process_records(self.read_records(batch, ranges, bad_records_.leave_out_filter(failing)))
            return results, found, failing
        finally:
            self.isolating = None

    def _isolation(self, batch: Batch, ranges: list[Any]) -> Isolation:
        offsets = sum(m.next_offset - m.first_offset for m in ranges)
        self.isolating = iso = Isolation(self.topology.name, batch.txid, Stage.TRANSFORM.value, offsets, self.metrics)
        return iso

    def _captured(self, batch: Batch, ranges: list[Any]) -> tuple[list[SinkResult], Found, list[BadRecord]]:
        """The txid's results from the error-capturing form, without the records the transforms fail on, and
        those (none: the results are the plain form's, at the cost of planning the capturing form). One job
        whatever the number of bad records; naming their errors then reads those records once more."""
        results, found = self._process_records(self.read_records(batch, ranges), capture=True)
        if not found.failed:
            return results, found, []
        iso = self._isolation(batch, ranges)
        try:
            iso.round("error-capturing run", len({k for _, k in found.failed.values()}), len(found.failed))
            try:
                failing = self._name_failures(batch, found.failed, iso)
            except BaseException:
                _unpersist(results)
                raise
            iso.done(failing)
            if not self._rows_left_out_alone():  # a failing record's other rows are in the results: run without it
                _unpersist(results)
                results, found = self._process_records(self.read_records(batch, ranges, bad_records_.leave_out_filter(failing)))
            return results, found, failing
        finally:
            self.isolating = None

    def _name_failures(self, batch: Batch, failed: dict[Any, tuple[CompiledSink, int]],
                       iso: Isolation) -> list[BadRecord]:
        """The records the capturing form marked, each with the error its failing step raises on it.

        Per sink and failing step, one job reads those records only and runs the steps before it (in the
        capturing form: nothing fails, no task is retried); the step is then evaluated on each row on the
        driver (a local relation: Spark's optimizer evaluates it, no job), which raises the row's error."""
        by_step: dict[tuple[int, int], list[Any]] = {}
        sinks = {id(c): i for i, c in enumerate(self.sinks)}
        for coords, (c, k) in sorted(failed.items()):
            by_step.setdefault((sinks[id(c)], capture_.step_of(c.steps, k)), []).append(coords)
        named: dict[Any, bad_records_.RecordError] = {}
        with bad_records_.quiet(self.spark):
            for n, ((i, step), records) in enumerate(by_step.items()):
                named.update(self._errors_at(batch, self.sinks[i], step, records))
                iso.round(f"errors named at step {step} of sink {self.sinks[i].sink.name}", len(by_step) - n - 1,
                          len(failed))
        out = []
        for coords, (c, k) in sorted(failed.items()):
            err = named.get(coords) or bad_records_.RecordError(
                Stage.TRANSFORM, "TRANSFORM_ERROR", f"{capture_.expressions(c.steps)[k]!r} failed on this record")
            t, p, o = coords
            out.append(BadRecord(t, p, o, err.stage, err.reason, err.message))
        return out

    def _errors_at(self, batch: Batch, c: CompiledSink, step: int,
                   records: list[Any]) -> dict[Any, bad_records_.RecordError]:
        """The error step ``step`` of ``c`` raises on the rows of ``records`` (see :meth:`_name_failures`)."""
        from pyspark.sql import DataFrame

        parts = bad_records_.sub_ranges(records, self.topology.name)
        read = self.read_records(batch, parts, bad_records_.keep_only_filter(records), counted=False)
        before = capture_.capture(read, c.steps[:step]).drop(capture_.ERROR_COLUMN)
        rows, schema = java_frame(before).collectAsList(), java_frame(before).schema()
        source = before.columns.index(SOURCE_COLUMN)
        jvm = gateway(self.spark)
        # rows alike but for their place in the source fail alike, when the step does not read the place
        same = [i for i, n in enumerate(before.columns) if n not in _PLACE_COLUMNS] \
            if not capture_.reads_place(c.steps[step], _PLACE_COLUMNS) else None
        out: dict[Any, bad_records_.RecordError] = {}
        by_content: dict[tuple[str, ...], bad_records_.RecordError | None] = {}
        for j in range(rows.size()):
            row = rows.get(j)
            src = row.getStruct(source)
            coords = (src.getString(0), int(src.getLong(1)), int(src.getLong(2)))
            if coords in out:
                continue
            content = None if same is None else tuple(str(row.get(i)) for i in same)
            if content is not None and content in by_content:
                known = by_content[content]
                if known is not None:
                    out[coords] = known
                continue
            local = DataFrame(java_session(self.spark).createDataFrame(jvm.java.util.Collections.singletonList(row),
                                                                        schema), self.spark)
            err = None
            try:
                c.steps[step].apply(local).collect()
            except Exception as e:  # noqa: BLE001 - the error is what we came for
                e.__context__ = None  # raised while the txid's first error is handled: name this one only
                err = bad_records_.record_error(e) or bad_records_.RecordError(
                    Stage.TRANSFORM, "TRANSFORM_ERROR", str(e)[:1000])
                out[coords] = err
            if content is not None:
                by_content[content] = err
        return out

    def _isolate(self, batch: Batch, ranges: list[Any], iso: Isolation) -> list[BadRecord]:
        """The records the transforms fail on by themselves (:func:`app.spark.bad_records.isolate`)."""
        coordinates = sorted((r[0], r[1], r[2]) for r in self.read_records(batch, ranges, counted=False)
                             .select("topic", "partition", "offset").collect())

        def probe(parts: Any) -> bad_records_.RecordError | None:
            records = self.read_records(batch, parts, counted=False)
            iso.probed()
            try:
                with bad_records_.quiet(self.spark):
                    for c in self.sinks:
                        bad_records_.force(self.keyed_rows(c, records)[0])
            except Exception as e:
                err = bad_records_.record_error(e)
                if err is None:
                    raise
                return err
            return None

        return bad_records_.isolate(coordinates, probe, self.topology.name,
                                    first_only=self.topology.errors.action is Action.FAIL)

    def read_records(self, batch: Batch, ranges: list[Any], rows: Any = None, *, counted: bool = True) -> Any:
        """The records of ``ranges``: one Spark partition per group of :func:`pack_ranges`, each range read once.

        A task per range would cost a Python task each (a round trip to a worker, tens of ms) for no
        more parallelism than the executors' cores give: a txid of 32 partitions on 4 cores reads in 4.
        """
        groups = pack_ranges(ranges, self.read_tasks)
        read = ReadRanges(self.spout, self.arrow_schema, groups, batch.txid, batch.attempt,
                          self._counts if counted else None, self.faults, self._bad if counted else None, rows)
        return self.spark.range(0, len(groups), 1, len(groups)).mapInArrow(read, self.records_schema)

    def _process_sink(self, c: CompiledSink, records: Any, found: Found, capture: bool = False) -> SinkResult:
        rows, observed = self.keyed_rows(c, records, capture)
        result = c.aggregate(rows, self.commit_partitions)
        if c.is_global:
            got = result.collect()  # one row at most
            found.add(c, result, observed)
            if c.mode is Mode.BUILTIN:
                got = [r for r in got if r[COUNT_COLUMN] > 0]
            if not got:
                return SinkResult(c)
            values = tuple(got[0][v] for v in c.values)
            return SinkResult(c, keys=1, partial=values[0] if len(values) == 1 else values)
        frame = result.persist()
        try:
            keys = _materialise(frame)  # the one job that reads, aggregates and caches
            found.add(c, frame, observed)
            return SinkResult(c, frame, keys)
        except BaseException:
            frame.unpersist(blocking=False)
            raise

    def _take_counts(self, batch: Batch) -> int:
        """Records read by ``batch`` (and forget older entries of the accumulator)."""
        counts = self._counts.value
        mine = [k for k in list(counts) if k[:2] == (batch.txid, batch.attempt)]
        total = sum(counts.get(k, 0) for k in mine)
        for k in mine:
            counts.pop(k, None)
        return int(total)

    def _take_bad(self, batch: Batch) -> list[BadRecord]:
        """Records ``batch``'s reads could not decode (and forget older entries of the accumulator)."""
        seen = self._bad.value
        mine = [k for k in list(seen) if k[:2] == (batch.txid, batch.attempt)]
        return [r for k in mine for r in seen.pop(k, ())]

    # -- commit -------------------------------------------------------------------------------

    def _commit_sink(self, r: SinkResult, batch: Batch, partitions: int) -> int:
        c = r.compiled
        if c.is_global:
            if r.partial is None:
                return 0
            assert c.aggregator is not None
            try:
                state = SnapshottableMap(c.sink.factory.make_state(c.spec, committed_txid=self.tables.committed_into(c, batch)))
                state.begin_commit(batch.txid)
                state.update(combine_updater(c.aggregator, r.partial))
                state.commit(batch.txid)
            except StateTableMissingError as e:
                c.sink.factory.forget(c.spec)  # opened on a table now gone: the next open checks again
                raise e.after(batch.txid - 1) from e
            return 1
        if not r.keys:
            return 0
        committed = self.tables.committed_into(c, batch)
        if isinstance(c.sink, PartitionPersist):
            task: Any = PersistRows(c.sink.factory, c.spec, c.sink.updater, batch.txid, batch.attempt, self.faults,
                                    committed)
        else:  # the frame is partitioned by key; each row names its commit partition, hence its cache
            assert c.aggregator is not None
            task = CommitAggregates(c.sink.factory, c.spec, c.aggregator, batch.txid, batch.attempt,
                                    faults=self.faults, partitions=partitions,
                                    previous=self._last_commit.get(c.sink.name), committed=committed)
        stats = r.frame.mapInArrow(task, self._stats_schema).collect()  # one stage: no shuffle after process
        for row in stats:
            self._add_metrics(row["metrics"])
        for row in stats:
            if row["fatal"] is not None:  # a task met a batch behind the state: stop, do not replay
                raise fatal.decode(row["fatal"])
        if not isinstance(c.sink, PartitionPersist):
            self._last_commit[c.sink.name] = batch.txid  # the cache files its next commit may trust
        return sum(row["keys"] for row in stats)

    def check_state(self, committed_txid: int, progress: Any) -> None:
        """Every table that held committed state is there (see :mod:`app.spark.state_tables`); checked before the
        first txid, so a pipeline with nothing new to read stops too."""
        self.tables.check(committed_txid, progress)

    def _add_metrics(self, deltas: str) -> None:
        for attr, labels, delta in json.loads(deltas):
            counter = getattr(self.metrics, attr)
            (counter.labels(**labels) if labels else counter).inc(delta)

    # -- bookkeeping --------------------------------------------------------------------------

    def _release(self, which: Any) -> None:
        with self._lock:
            done = [k for k in self._held if which(*k)]
            released = [self._held.pop(k) for k in done]
        counts = self._counts.value
        for k in [k for k in list(counts) if which(k[0], k[1])]:
            counts.pop(k, None)
        seen = self._bad.value
        for k in [k for k in list(seen) if which(k[0], k[1])]:
            seen.pop(k, None)
        for processed in released:
            _unpersist(processed.sinks)

    def _follow_executors(self) -> None:
        """Choose the read and commit tasks (and the shuffle partitions) from the executors running now;
        log the choice when it is made and whenever it changes."""
        read_tasks, commit_partitions = self._given
        previous = self.parallelism
        chosen = parallelism_.choose(parallelism_.observe(self.spark), previous, read_tasks=read_tasks,
                                     commit_partitions=commit_partitions, keep_shuffle=self._keep_shuffle)
        if chosen == previous:
            return
        if chosen.shuffle_partitions is not None:
            self.spark.conf.set(parallelism_.SHUFFLE_PARTITIONS, str(chosen.shuffle_partitions))
        self.parallelism, self.read_tasks, self.commit_partitions = chosen, chosen.read_tasks, chosen.commit_partitions
        if previous is None:
            configured = "" if chosen.shuffle_partitions is not None else \
                f": {self.spark.conf.get(parallelism_.SHUFFLE_PARTITIONS)}"
            log.info("topology %s: parallelism %s%s", self.topology.name, chosen.describe(), configured)
        else:
            log.info("topology %s: the executors changed, parallelism now %s (was %s)", self.topology.name,
                     chosen.describe(), previous.describe())

    def _group(self, txid: int) -> str:
        return f"{self.topology.name}:txid-{txid}"

    @contextmanager
    def _job(self, batch: Batch, phase: str) -> Iterator[None]:
        sc = self.spark.sparkContext
        sc.setJobGroup(self._group(batch.txid), f"{self.topology.name} txid {batch.txid} attempt {batch.attempt}: "
                       f"{phase}", interruptOnCancel=True)
        sc.setLocalProperty("spark.scheduler.pool", phase)
        try:
            yield
        finally:
            sc.setLocalProperty("spark.scheduler.pool", None)


#: The columns that say where a row's record is in the source (not what it holds).
_PLACE_COLUMNS = frozenset({"topic", "partition", "offset", "timestamp", SOURCE_COLUMN, PLACE_COLUMN})


def _stored_isolation(batch: Batch, key: tuple[Any, ...]) -> list[BadRecord]:
    """The bad records an earlier attempt (of any process) isolated in these ranges of ``batch``'s txid."""
    if batch.progress is None:
        return []
    doc = batch.progress.isolated(batch.txid)
    if doc is None or [tuple(r) for r in doc["ranges"]] != [tuple(r) for r in key]:
        return []
    records = [BadRecord(t, int(p), int(o), Stage(stage), reason, message)
               for t, p, o, stage, reason, message in doc["records"]]
    log.info("txid %d: reusing the %d bad records isolated by an earlier attempt", batch.txid, len(records))
    return records


def _store_isolation(batch: Batch, key: tuple[Any, ...], failing: Sequence[BadRecord]) -> None:
    """Keep ``failing`` with ``batch``'s txid (fenced by the lease epoch): a restart or a takeover reuses them."""
    if batch.progress is None:
        return
    batch.progress.store_isolated(batch.txid, {
        "ranges": [list(r) for r in key],
        "records": [[b.topic, b.partition, b.offset, b.stage.value, b.reason, b.message] for b in failing]})


def _unpersist(results: Any) -> None:
    for r in results:
        if r.frame is not None:
            r.frame.unpersist(blocking=False)


def pack_ranges(ranges: Sequence[PartitionMetadata], tasks: int) -> tuple[tuple[PartitionMetadata, ...], ...]:
    """``ranges`` in at most ``tasks`` groups of about equal records (each group by topic and partition).

    Largest range first, into the group with the fewest records so far (ties: the lowest group): the
    same plan always packs the same way, and the heaviest group exceeds the lightest by one range at most.
    """
    groups: list[list[PartitionMetadata]] = [[] for _ in range(max(1, min(tasks, len(ranges))))]
    loads = [0] * len(groups)
    for meta in sorted(ranges, key=lambda m: (-m.record_count, m.topic, m.partition)):
        g = loads.index(min(loads))
        groups[g].append(meta)
        loads[g] += max(1, meta.record_count)  # a range that may hold nothing still costs a read
    return tuple(tuple(sorted(g, key=lambda m: (m.topic, m.partition))) for g in groups if g)


def _materialise(frame: Any) -> int:
    """Build ``frame``'s cache in one job and return its rows: an RDD count of its physical plan.

    ``DataFrame.count()`` would plan an aggregate over the cache (a partial count per partition, a
    shuffle to one partition, a final count: one more stage and task); counting the rows of the
    plan's RDD (the cached scan) builds the same cache with one stage per shuffle of the result.
    """
    return int(java_frame(frame).queryExecution().toRdd().count())
