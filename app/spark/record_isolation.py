"""Record isolation: the records a txid's transforms fail on, found, named, and kept for the txid's replays."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from app.bad_records.error_policy import Action
from app.metrics import Metrics
from app.spark import bad_record_finding
from app.spark import capture as capture_
from app.spark.isolation_report import Isolation
from app.spark.jvm import gateway, java_frame, java_session
from app.spark.plan import SOURCE_COLUMN, CompiledSink
from app.spark.processing import LeftOutRows, SinkResult, SinkRuns, unpersist
from app.spark.reading import Reads
from app.topology.batch import Batch
from app.topology.topology import Topology
from app.topology.upserts import PLACE_COLUMN
from spouts.bad_records import BadRecord, Stage

#: The executor's log (these lines are the executor's, wherever its parts live).
log = logging.getLogger("app.spark.batch_executor")

#: The columns that say where a row's record is in the source (not what it holds).
_PLACE_COLUMNS = frozenset({"topic", "partition", "offset", "timestamp", SOURCE_COLUMN, PLACE_COLUMN})

#: A process run's results, the rows it left out, and the records the transforms fail on.
Isolated = tuple[list[SinkResult], LeftOutRows, list[BadRecord]]


class RecordIsolation:
    """Finds the records a txid's transforms fail on (the error-capturing run, or bisection), names their errors,
    and keeps them by ranges (here and in the txid's progress) so that a replay leaves them out at once."""

    def __init__(self, spark: Any, topology: Topology, runs: SinkRuns, reads: Reads, metrics: Metrics) -> None:
        self.spark, self.topology, self.runs, self.reads, self.metrics = spark, topology, runs, reads, metrics
        self.sinks = runs.sinks
        self._isolated: dict[tuple[Any, ...], list[BadRecord]] = {}  # ranges -> records the transforms fail on
        self.isolating: Isolation | None = None  # the isolation running now (its status is a /readyz reason)

    def known(self, batch: Batch, key: tuple[Any, ...]) -> list[BadRecord]:
        """The records isolated before in these ranges: a replay of the same ranges meets the same bad records."""
        failing = self._isolated.get(key)
        return _stored_isolation(batch, key) if failing is None else failing

    def keep(self, batch: Batch, key: tuple[Any, ...], failing: list[BadRecord]) -> None:
        """Keep ``failing``, isolated now, for a replay: here and in the txid's progress."""
        self._isolated = {**dict(list(self._isolated.items())[-15:]), key: failing}
        _store_isolation(batch, key, failing)

    def captured(self, batch: Batch, ranges: list[Any], partitions: int, *, collect: int = 0) -> Isolated:
        """The txid's results from the error-capturing form, without the records the transforms fail on, and
        those (none: the results are the plain form's, at the cost of planning the capturing form). One job
        whatever the number of bad records; naming their errors then reads those records once more.
        ``collect``: as :meth:`SinkRuns.results`."""
        results, left_out = self.runs.results(self.reads.records(batch, ranges), partitions, capture=True,
                                              collect=collect)
        if not left_out.failed:
            return results, left_out, []
        iso = self._isolation(batch, ranges)
        try:
            iso.round("error-capturing run", len({k for _, k in left_out.failed.values()}), len(left_out.failed))
            try:
                failing = self._name_failures(batch, left_out.failed, iso)
            except BaseException:
                unpersist(results)
                raise
            iso.done(failing)
            if not self.runs.one_row_per_record():  # a failing record's other rows are in the results: run without it
                unpersist(results)
                results, left_out = self.runs.results(
                    self.reads.records(batch, ranges, bad_record_finding.leave_out_filter(failing)), partitions,
                    collect=collect)
            return results, left_out, failing
        finally:
            self.isolating = None

    def without_failing(self, batch: Batch, ranges: list[Any], partitions: int, error: Exception, *,
                        collect: int = 0) -> Isolated:
        """After a record error of a sink whose transforms cannot run in the error-capturing form (a Python
        function, a generator): the txid's results without the records they fail on, found by bisection, and
        those (``collect``: as :meth:`SinkRuns.results`)."""
        iso = self._isolation(batch, ranges)
        try:
            failing = self._isolate(batch, ranges, iso)
            if not failing:
                raise error
            iso.done(failing)
            results, left_out = self.runs.results(
                self.reads.records(batch, ranges, bad_record_finding.leave_out_filter(failing)), partitions, collect=collect)
            return results, left_out, failing
        finally:
            self.isolating = None

    def _isolation(self, batch: Batch, ranges: list[Any]) -> Isolation:
        offsets = sum(m.next_offset - m.first_offset for m in ranges)
        self.isolating = iso = Isolation(self.topology.name, batch.txid, Stage.TRANSFORM.value, offsets, self.metrics)
        return iso

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
        named: dict[Any, bad_record_finding.RecordError] = {}
        with bad_record_finding.quiet(self.spark):
            for n, ((i, step), records) in enumerate(by_step.items()):
                named.update(self._errors_at(batch, self.sinks[i], step, records))
                iso.round(f"errors named at step {step} of sink {self.sinks[i].sink.name}", len(by_step) - n - 1,
                          len(failed))
        out = []
        for coords, (c, k) in sorted(failed.items()):
            err = named.get(coords) or bad_record_finding.RecordError(
                Stage.TRANSFORM, "TRANSFORM_ERROR", f"{capture_.expressions(c.steps)[k]!r} failed on this record")
            t, p, o = coords
            out.append(BadRecord(t, p, o, err.stage, err.reason, err.message))
        return out
    def _errors_at(self, batch: Batch, c: CompiledSink, step: int,
                   records: list[Any]) -> dict[Any, bad_record_finding.RecordError]:
        """The error step ``step`` of ``c`` raises on the rows of ``records`` (see :meth:`_name_failures`)."""
        from pyspark.sql import DataFrame

        parts = bad_record_finding.sub_ranges(records, self.topology.name)
        read = self.reads.records(batch, parts, bad_record_finding.keep_only_filter(records), counted=False)
        before = capture_.capture(read, c.steps[:step]).drop(capture_.ERROR_COLUMN)
        rows, schema = java_frame(before).collectAsList(), java_frame(before).schema()
        source = before.columns.index(SOURCE_COLUMN)
        jvm = gateway(self.spark)
        # rows alike but for their place in the source fail alike, when the step does not read the place
        same = [i for i, n in enumerate(before.columns) if n not in _PLACE_COLUMNS] \
            if not capture_.reads_place(c.steps[step], _PLACE_COLUMNS) else None
        out: dict[Any, bad_record_finding.RecordError] = {}
        by_content: dict[tuple[str, ...], bad_record_finding.RecordError | None] = {}
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
                err = bad_record_finding.record_error(e) or bad_record_finding.RecordError(
                    Stage.TRANSFORM, "TRANSFORM_ERROR", str(e)[:1000])
                out[coords] = err
            if content is not None:
                by_content[content] = err
        return out

    def _isolate(self, batch: Batch, ranges: list[Any], iso: Isolation) -> list[BadRecord]:
        """The records the transforms fail on by themselves (:func:`app.spark.bad_record_finding.isolate`)."""
        coordinates = sorted((r[0], r[1], r[2]) for r in self.reads.records(batch, ranges, counted=False)
                             .select("topic", "partition", "offset").collect())

        def probe(parts: Any) -> bad_record_finding.RecordError | None:
            records = self.reads.records(batch, parts, counted=False)
            iso.probed()
            try:
                with bad_record_finding.quiet(self.spark):
                    for c in self.sinks:
                        bad_record_finding.force(self.runs.keyed_rows(c, records)[0])
            except Exception as e:
                err = bad_record_finding.record_error(e)
                if err is None:
                    raise
                return err
            return None

        return bad_record_finding.isolate(coordinates, probe, self.topology.name,
                                    first_only=self.topology.errors.action is Action.FAIL)


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
