"""A process run: each sink's result from one read of the records, and the rows it left out (null keys, failed rows)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from app.spark import bad_record_finding
from app.spark import capture as capture_
from app.spark.jvm import java_frame
from app.spark.plan import COUNT_COLUMN, SOURCE_COLUMN, CompiledSink, Mode
from spouts.bad_records import BadRecord

#: ``collect`` of :meth:`SinkRuns.results`: a keyed result collected to the driver by its job, whatever its rows.
COLLECT_ALL = sys.maxsize


@dataclass(frozen=True)
class SinkResult:
    """One sink's share of a processed batch: the persisted result, its rows collected to the driver (a keyed
    aggregate of few keys), or a global aggregate's partial."""

    compiled: CompiledSink
    frame: Any = None  # persisted DataFrame (keyed and partition_persist sinks), unless collected
    keys: int = 0  # rows in ``frame`` or ``collected``, or 1 when a global partial exists
    partial: Any = None  # global aggregates: the combined value (scalar or tuple), None if no rows
    collected: pa.Table | None = None  # a keyed aggregate's rows, collected by the process job

    @property
    def keyed(self) -> bool:
        """Whether the result is rows by key (persisted or collected), not a global partial."""
        return self.frame is not None or self.collected is not None

    def arrow(self) -> pa.Table:
        """The result's rows: collected already, or collected now from the cache (a Spark job)."""
        return self.collected if self.collected is not None else self.frame.toArrow()


@dataclass(frozen=True)
class ObservationNames:
    """The names of a sink's observations in its process job (None: not observed)."""

    null_keys: str | None = None
    transform_errors: str | None = None


@dataclass
class LeftOutRows:
    """The rows a process run left out: null-key records, and records a transform failed on (by sink and
    expression index, from the error-capturing form)."""

    null_keys: list[BadRecord] = field(default_factory=list)
    failed: dict[Any, tuple[CompiledSink, int]] = field(default_factory=dict)

    def add(self, c: CompiledSink, df: Any, observed: ObservationNames) -> None:
        """Take what ``observed`` saw while ``df`` (materialised or collected) ran."""
        if observed.null_keys is not None:
            self.null_keys.extend(bad_record_finding.null_key_records(df, observed.null_keys, c.keys, c.sink.name,
                                                                c.sink.factory.key_limits(c.spec)))
        if observed.transform_errors is not None:
            for coords, k in bad_record_finding.failed_expressions(df, observed.transform_errors).items():
                self.failed.setdefault(coords, (c, k))


#: After a txid that met a key the state cannot store, the clean txids in a row before sinks check per key again.
ROWS_CHECKED_TXIDS = 20


class SinkRuns:
    """Runs the compiled sinks over a DataFrame of records: transforms, keys checked, aggregates persisted.

    A sink of Spark's own aggregates whose records may yield several rows checks its keys on the aggregate's
    rows, one per key, and finds a bad key's records by one more job (:meth:`checked_per_key`); a sink of
    one row per record checks every row, which finds them in the same job at a cost per record (the
    txid does not run again for them). Once a txid has met a bad key, every sink checks every row
    (:meth:`checked_per_row`: found in the same job) until ``rows_checked_txids`` txids in a row are
    clean (:meth:`txid_done`), so a topic that keeps carrying bad keys pays no extra job. Both find the
    same records: the choice changes only the cost.
    """

    def __init__(self, sinks: tuple[CompiledSink, ...]) -> None:
        self.sinks = sinks
        self.rows_checked_txids = ROWS_CHECKED_TXIDS
        self._rows_checked = 0  # clean txids left before the sinks check per key again

    def results(self, records: Any, partitions: int, *, capture: bool = False, collect: int = 0,
                named: Callable[[], Any] | None = None) -> tuple[list[SinkResult], LeftOutRows]:
        """Each sink's result, and the records left out of them (found in the same jobs): rows with a null
        group-by key, and (``capture``: the transforms in the error-capturing form) rows they fail on.
        ``collect``: a keyed aggregate of fewer rows is collected to the driver by its job (a txid of few keys: its
        commit then needs no job); :data:`COLLECT_ALL`: collected whatever its rows, and not cached; 0: cached where
        its rows ran. ``named``: the same records with their coordinates, for the job that names bad-key records
        when ``records`` lack them (None: ``records``)."""
        several = len(self.sinks) > 1
        if several:
            records = records.persist()
        results: list[SinkResult] = []
        left_out = LeftOutRows()
        try:
            results.extend(self._sink(c, records, partitions, left_out, capture=capture, collect=collect,
                                      named=named) for c in self.sinks)
            if not self.sinks:
                materialise(records)
        except BaseException:
            unpersist(results)  # nobody will commit them
            raise
        finally:
            if several:
                records.unpersist()
        return results, left_out

    def one_row_per_record(self) -> bool:
        """Whether leaving out a bad row leaves out its whole record: one sink, one row per record."""
        return len(self.sinks) == 1 and self.sinks[0].one_row_per_record

    def capturable(self) -> bool:
        """Whether every sink's transforms run in the error-capturing form (:mod:`app.spark.capture`)."""
        return all(capture_.capturable(c.steps) and c.carries_source for c in self.sinks)

    def keyed_rows(self, c: CompiledSink, records: Any, capture: bool = False) -> tuple[Any, ObservationNames]:
        """``c``'s transformed rows without null keys or keys the state refuses (and the observations naming the
        rows left out), or, when its rows lost their source coordinates, rows that fail on such a key (then found
        by bisection).
        ``capture``: the transforms in the error-capturing form, failed rows left out too."""
        rows, errors = self._transformed(c, records, capture)
        limits = c.sink.factory.key_limits(c.spec) if c.keys else None  # keys the state refuses: bad records too
        if c.keys and c.carries_source:
            rows, null_keys = bad_record_finding.split_null_keys(rows, c.keys, c.sink.name, SOURCE_COLUMN, limits)
            return rows, ObservationNames(null_keys, errors)
        return bad_record_finding.guard_keys(rows, c.keys, c.sink.name, limits), ObservationNames(None, errors)

    @staticmethod
    def _transformed(c: CompiledSink, records: Any, capture: bool) -> tuple[Any, str | None]:
        """``c``'s transformed rows (``capture``: in the error-capturing form, failed rows left out, and the name
        of the observation naming them)."""
        if capture:
            return bad_record_finding.split_transform_errors(capture_.capture(records, c.steps), c.sink.name,
                                                       SOURCE_COLUMN, capture_.ERROR_COLUMN)
        return c.transform(records), None

    def _sink(self, c: CompiledSink, records: Any, partitions: int, left_out: LeftOutRows, *,
              capture: bool = False, collect: int = 0, named: Callable[[], Any] | None = None) -> SinkResult:
        if self.per_key(c):
            return self.checked_per_key(c, records, partitions, left_out, capture=capture, collect=collect,
                                        named=named)
        return self.checked_per_row(c, records, partitions, left_out, capture=capture, collect=collect)

    def txid_done(self, *, bad_keys: bool) -> None:
        """A txid's processing ended, having met keys the state cannot store or not (counted per txid, not per
        run: a txid may run again without its bad records)."""
        self._rows_checked = self.rows_checked_txids if bad_keys else max(0, self._rows_checked - 1)

    def checks_rows(self) -> bool:
        """Whether the sinks check every row now (a recent txid met a bad key), not in their planned forms."""
        return self._rows_checked > 0

    def per_key(self, c: CompiledSink) -> bool:
        """Whether ``c``'s keys are checked on the aggregate's rows now: a keyed sink of Spark's own aggregates
        whose rows keep their source and may be several per record (a generator: the rows an observation
        would check multiply, and a bad key's txid runs again anyway), and that met no bad key in its last
        ``rows_checked_txids`` txids."""
        return (c.mode is Mode.BUILTIN and bool(c.keys) and c.carries_source and not c.is_global
                and not c.one_row_per_record and self._rows_checked == 0)

    def planned(self, c: CompiledSink, records: Any, partitions: int) -> Any:
        """``c``'s result as the process job plans it (keys checked), neither run nor persisted: the plan a
        standby warms up."""
        if self.per_key(c):
            return self._keys_split(c, self._transformed(c, records, capture=False)[0], partitions)[0]
        return c.aggregate(self.keyed_rows(c, records)[0], partitions)

    @staticmethod
    def _keys_split(c: CompiledSink, rows: Any, partitions: int) -> tuple[Any, str]:
        """``rows`` aggregated without the keys the state cannot store, and the observation counting those."""
        return bad_record_finding.split_bad_groups(c.aggregate(rows, partitions), c.keys, c.sink.name,
                                             c.sink.factory.key_limits(c.spec))

    def checked_per_row(self, c: CompiledSink, records: Any, partitions: int, left_out: LeftOutRows, *,
                        capture: bool = False, collect: int = 0) -> SinkResult:
        """Any sink: rows with keys the state cannot store are left out before the aggregation, named by an
        observation on every row (or, rows without their source, found by bisection)."""
        rows, observed = self.keyed_rows(c, records, capture)
        result = c.aggregate(rows, partitions)
        if c.is_global:
            got = result.collect()  # one row at most
            left_out.add(c, result, observed)
            if c.mode is Mode.BUILTIN:
                got = [r for r in got if r[COUNT_COLUMN] > 0]
            if not got:
                return SinkResult(c)
            values = tuple(got[0][v] for v in c.values)
            return SinkResult(c, keys=1, partial=values[0] if len(values) == 1 else values)
        with _released_on_error(_computed(c, result, collect)) as done:
            left_out.add(c, result, observed)
        return done

    def checked_per_key(self, c: CompiledSink, records: Any, partitions: int, left_out: LeftOutRows, *,
                        capture: bool = False, collect: int = 0, named: Callable[[], Any] | None = None) -> SinkResult:
        """A keyed sink of Spark's own aggregates: keys the state cannot store are found among the aggregate's
        rows, one check per key instead of one per row; their records, only when there are any, by a job over
        the rows (of ``named``'s records, when given: ``records`` lack the coordinates)."""
        rows, errors = self._transformed(c, records, capture)
        result, name = self._keys_split(c, rows, partitions)
        with _released_on_error(_computed(c, result, collect)) as done:
            left_out.add(c, result, ObservationNames(None, errors))
            if bad_record_finding.observed_count(result, name):
                if named is not None:
                    rows = self._transformed(c, named(), capture)[0]
                left_out.null_keys.extend(bad_record_finding.bad_key_records(rows, c.keys, c.sink.name, SOURCE_COLUMN,
                                                                       c.sink.factory.key_limits(c.spec)))
        return done


def _computed(c: CompiledSink, result: Any, collect: int) -> SinkResult:
    """``c``'s keyed ``result`` run by one job that reads and aggregates the records: its rows collected to the
    driver when fewer than ``collect`` (a keyed aggregate; :data:`COLLECT_ALL`: not cached either), else cached
    where they ran (and counted by a second job when the first collected ``collect`` rows and stopped)."""
    if collect >= COLLECT_ALL and c.mode is not Mode.ROWS:
        table = result.toArrow()
        return SinkResult(c, keys=table.num_rows, collected=table)
    frame = result.persist()
    try:
        if collect <= 0 or c.mode is Mode.ROWS:
            return SinkResult(c, frame, materialise(frame))
        # one job caches every partition and brings at most ``collect`` rows (a limit per partition, then one
        # shuffle into a single partition): all of them when fewer
        table = frame.limit(collect).toArrow()
        if table.num_rows < collect:
            return SinkResult(c, frame, table.num_rows, collected=table)
        return SinkResult(c, frame, materialise(frame))
    except BaseException:
        frame.unpersist(blocking=False)
        raise


@contextmanager
def _released_on_error(result: SinkResult) -> Iterator[SinkResult]:
    """``result``, its cache released if the block raises (nobody will commit it)."""
    try:
        yield result
    except BaseException:
        unpersist([result])
        raise


def unpersist(results: Iterable[SinkResult]) -> None:
    """Release the persisted frames of ``results``."""
    for r in results:
        if r.frame is not None:
            r.frame.unpersist(blocking=False)


def materialise(frame: Any) -> int:
    """Build ``frame``'s cache in one job and return its rows: an RDD count of its physical plan.

    ``DataFrame.count()`` would plan an aggregate over the cache (a partial count per partition, a
    shuffle to one partition, a final count: one more stage and task); counting the rows of the
    plan's RDD (the cached scan) builds the same cache with one stage per shuffle of the result.
    """
    return int(java_frame(frame).queryExecution().toRdd().count())
