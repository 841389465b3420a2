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
   :mod:`app.failures.spark_fatal`).
2. Global sinks: on the driver, through a ``SnapshottableMap`` (one key, one value).
3. ``partition_persist`` sinks: tasks call the user's updater with their rows.
4. The persisted results are unpersisted (in every case: a failed commit is replayed from process).

So a txid of one keyed sink is two Spark jobs: process (read and partial aggregates, shuffle by key,
final aggregates cached and counted: two stages) and commit (one stage); a txid whose keys are expected
few is one, its process job collecting the result for a commit on the driver (:meth:`Commits.collects`); so is
a txid whose keys are unsure and prove few (cached and collected by one job, at most the threshold's rows).
The plan is frozen between them, before the commit job starts: the batch protocol's order holds
(adaptive query execution is off, see :mod:`app.spark.session`, or every shuffle stage would be a
job of its own).

A failed task is retried by Spark (``local[N,F]``, see :mod:`app.spark.session`); a failed job
raises, and the coordinator replays the txid. Where the transforms are SQL without a generator, the
process job runs them in the error-capturing form (:mod:`app.spark.capture`): a record they fail on
is a row marked and left out in the same job (:mod:`app.spark.bad_record_finding`), never a failed task, so
a dirty txid costs the clean one's jobs and one more that names the errors. Jobs carry the job group ``<topology>:txid-<N>``
(``cancel(txid)``) and run in scheduler pool ``process`` or ``commit``: with ``max_pending > 1``
the coordinator processes N+1 in a worker thread while committing N, and both share executors.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from app.metrics import METRICS, Metrics
from app.spark import bad_record_finding, executor_watch, warmup
from app.spark.committing import Commits, driver_commit_keys
from app.spark.job_control import JobControl
from app.spark.masters import state_refusal
from app.spark.parallelism import Parallelism
from app.spark.plan import CompiledSink, compile_sink, register_spec
from app.spark.processing import SinkResult, SinkRuns, unpersist
from app.spark.reading import Reads
from app.spark.record_columns import read_columns
from app.spark.record_isolation import Isolated, RecordIsolation
from app.spark.state_tables import StateTables
from app.spark.tasks import STATS_SCHEMA, TaskFaults, spark_arrow_schema
from app.topology.batch import Batch, CommitStats
from app.topology.topology import Topology
from spouts.bad_records import BadRecord
from spouts.metadata import BatchPlan
from spouts.protocols import ArrowSpout, DescribesRead
from states.spec import MapSpec, StateKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SparkBatch:
    """What ``process`` hands to ``commit``: the txid it was made for, records read, each sink's result."""

    txid: int
    attempt: int
    records: int
    sinks: tuple[SinkResult, ...]
    bad_records: tuple[BadRecord, ...] = ()  # left out of ``sinks``; the error policy settles them
    commit_partitions: int = 1  # what the keyed results were partitioned into (the commit tasks' caches)


class SparkExecutor:
    """Runs a :class:`~app.topology.topology.Topology`'s batches on Spark (the BatchExecutor protocol).

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
    ``driver_keys``: keyed results of fewer keys are committed on the driver, and collected by the process job
    of a txid expected to have fewer (:mod:`app.spark.committing`; 0: always cached and committed by commit
    tasks; default: the session's ``spark.trident.driverCommitKeys``, else
    :data:`~app.spark.committing.DRIVER_COMMIT_KEYS`).
    """

    def __init__(self, spark: Any, topology: Topology, *, commit_partitions: int | None = None,
                 read_tasks: int | None = None, faults: TaskFaults | None = None, metrics: Metrics = METRICS,
                 driver_keys: int | None = None) -> None:
        spout = topology.spout
        if not isinstance(spout, ArrowSpout):
            msg = (f"topology {topology.name!r}: Spark reads a spout with read_arrow and arrow_schema "
                   f"(spouts.protocols.ArrowSpout), not {type(spout).__name__}")
            raise ValueError(msg)  # noqa: TRY004, RUF100  an invalid topology is a ValueError for every caller
        master = spark.sparkContext.master
        for _, sink in topology.sinks:
            if not sink.factory.shared_across_processes:
                msg = (f"sink {sink.name!r}: the {sink.factory.backend} backend lives in one process; Spark "
                       "executors need one every executor process opens (sqlite on a local master, cassandra on any)")
                raise ValueError(msg)
            refusal = state_refusal(sink.factory.backend, master)
            if refusal is not None:
                msg = f"sink {sink.name!r}: {refusal}"
                raise ValueError(msg)
        self.spark, self.topology, self.spout = spark, topology, spout
        self.faults, self.metrics = faults, metrics
        self.jobs = JobControl(spark, topology.name, read_tasks, commit_partitions)
        chosen = self.jobs.follow_executors()  # chosen again before every txid
        self.commit_partitions = chosen.commit_partitions
        from pyspark.sql.pandas.types import from_arrow_schema

        arrow_schema = spark_arrow_schema(spout.arrow_schema)
        self.records_schema = from_arrow_schema(arrow_schema, prefer_timestamp_ntz=False)
        self.sinks = self._compile()
        self.runs = SinkRuns(self.sinks)
        used = read_columns(spark, self.records_schema, self.runs, self.commit_partitions)
        columns = used.named if len(used.named) < len(arrow_schema) else None  # the read tasks build only those
        if columns is not None:
            arrow_schema = pa.schema([f for f in arrow_schema if f.name in columns])
            self.records_schema = from_arrow_schema(arrow_schema, prefer_timestamp_ntz=False)
        self.reads = Reads(spark, spout, arrow_schema, self.records_schema, faults, columns=columns,
                           planned=used.planned if used.planned != used.named else None)
        self.reads.tasks = chosen.read_tasks
        if isinstance(spout, DescribesRead):
            log.info("topology %s: read tasks read through %s", topology.name, spout.describe_read(columns))
        self.isolation = RecordIsolation(spark, topology, self.runs, self.reads, metrics)
        self.tables = StateTables(self.sinks)  # which tables a txid may create, which must be there
        self.commits = Commits(self.tables, from_arrow_schema(STATS_SCHEMA), faults, metrics,
                               driver_commit_keys(spark) if driver_keys is None else driver_keys)
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], SparkBatch] = {}  # persisted results not yet released

    @property
    def problem(self) -> str | None:
        """What holds this executor up now, for ``/readyz``: bad records being isolated, or no Spark executor
        for longer than the bound (:mod:`app.spark.executor_watch`)."""
        isolating = self.isolation.isolating
        return isolating.status if isolating is not None else executor_watch.problem(self.spark)

    @property
    def parallelism(self) -> Parallelism | None:
        """The read and commit tasks chosen for the executors running now."""
        return self.jobs.parallelism

    @property
    def read_tasks(self) -> int:
        """Read tasks per txid at most, as chosen now."""
        return self.reads.tasks

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
        self._release(lambda txid, _attempt: txid >= batch.txid)  # earlier attempts of this and later txids failed
        partitions = self._follow_executors()
        ranges = [m for m in batch.plan if not m.empty]
        if not ranges:
            return SparkBatch(batch.txid, batch.attempt, 0, ())
        key = tuple((m.topic, m.partition, m.first_offset, m.next_offset) for m in ranges)
        failing = self.isolation.known(batch, key)  # a replay of the same ranges meets the same bad records
        known = bool(failing)
        planned = sum(m.record_count for m in ranges)
        collect = self.commits.collects(batch, planned)  # then the commit runs no Spark job
        with self.jobs.job(batch, "process"):
            results, left_out, failing = self._results(batch, ranges, partitions, failing, collect)
            if failing and not known:  # isolated now: kept for a replay, here and in the txid's progress
                self.isolation.keep(batch, key, failing)
            null_keys = left_out.null_keys
            if null_keys and not self.runs.one_row_per_record():
                # another row of a null-key record (another sink's, or a second row of the record) may be
                # in a result: run the txid once more without those records
                unpersist(results)
                results, _ = self.runs.results(
                    self.reads.records(batch, ranges, bad_record_finding.leave_out_filter([*failing, *null_keys])),
                    partitions, collect=collect)
            self.runs.txid_done(bad_keys=bool(null_keys))
            self.commits.processed(planned, results)
        counted, undecodable = self.reads.take_counts(batch), self.reads.take_bad(batch)
        bad = tuple(undecodable) + tuple(failing) + tuple(null_keys)
        processed = SparkBatch(batch.txid, batch.attempt, counted, tuple(results), bad, partitions)
        with self._lock:
            self._held[(batch.txid, batch.attempt)] = processed
        return processed

    def _results(self, batch: Batch, ranges: list[Any], partitions: int, failing: list[BadRecord],
                 collect: int) -> Isolated:
        """The txid's results without the records the transforms fail on (``failing``, known before, or found
        now), the rows left out of them, and those records (``collect``: see :meth:`SinkRuns.results`)."""
        try:
            if not failing and self.runs.capturable():
                # a record the transforms fail on is a row marked in the same job, never a failed task
                return self.isolation.captured(batch, ranges, partitions, collect=collect)
            # a function transform, or a replay without the known bad records: the plain form; in the planned
            # forms it reads the columns their plans use (a job naming bad-key records reads the coordinates)
            planned = not self.runs.checks_rows()
            results, left_out = self.runs.results(
                self.reads.records(batch, ranges, bad_record_finding.leave_out_filter(failing), planned=planned),
                partitions, collect=collect,
                named=(lambda: self.reads.records(batch, ranges, counted=False)) if planned else None)
        except Exception as e:
            if failing or self.runs.capturable() or bad_record_finding.record_error(e) is None:
                raise  # transient, or not a record's fault (the capturing form found none): retried whole
            return self.isolation.without_failing(batch, ranges, partitions, e, collect=collect)
        return results, left_out, failing

    def commit(self, batch: Batch, processed: SparkBatch) -> CommitStats:
        """Apply ``processed`` to every sink's state as txid ``batch.txid``."""
        if processed.txid != batch.txid:
            msg = f"commit of txid {batch.txid} given the result of txid {processed.txid}"
            raise ValueError(msg)
        try:
            with self.jobs.job(batch, "commit"):
                self.tables.create(batch)
                keys = sum(self.commits.sink(r, batch, processed.commit_partitions) for r in processed.sinks)
        finally:
            self._release(lambda txid, _attempt: txid <= batch.txid)
        return CommitStats(processed.records, keys)

    def cancel(self, txid: int) -> None:
        """Cancel the running Spark jobs of ``txid`` (the job raises; the coordinator replays)."""
        self.jobs.cancel(txid)

    def close(self) -> None:
        """Release every persisted result (the session stays: it may be shared)."""
        self._release(lambda _txid, _attempt: True)

    def warm_up(self, plan: BatchPlan) -> int:
        """Pay a cold first txid's costs while a standby waits (:mod:`app.spark.warmup`); writes nothing.
        Returns how many commit tasks opened a state."""
        return warmup.warm_up(self, plan)

    def check_state(self, committed_txid: int, progress: Any) -> None:
        """Every table that held committed state is there (see :mod:`app.spark.state_tables`); checked before the
        first txid, so a pipeline with nothing new to read stops too."""
        self.tables.check(committed_txid, progress)

    # -- bookkeeping --------------------------------------------------------------------------

    def _release(self, which: Callable[[int, int], bool]) -> None:
        with self._lock:
            done = [k for k in self._held if which(*k)]
            released = [self._held.pop(k) for k in done]
        self.reads.forget(which)
        for processed in released:
            unpersist(processed.sinks)

    def _follow_executors(self) -> int:
        """Choose the read and commit tasks from the executors running now (:class:`JobControl`); returns the
        commit partitions."""
        chosen = self.jobs.follow_executors()
        self.reads.tasks, self.commit_partitions = chosen.read_tasks, chosen.commit_partitions
        return chosen.commit_partitions
