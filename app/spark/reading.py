"""The process job's input: a txid's ranges read on executors in packed read tasks, and what the reads counted."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from app.spark import bad_record_finding
from app.spark.record_columns import padded
from app.spark.tasks import ReadRanges, TaskFaults
from app.topology.batch import Batch
from spouts.bad_records import BadRecord
from spouts.metadata import PartitionMetadata
from spouts.protocols import ArrowSpout


class RangeCounts(AccumulatorParam[dict[Any, int]]):
    """Merges ``{range: records}`` dicts; a range counted twice (a recomputed task) keeps one entry."""

    def zero(self, value: dict[Any, int]) -> dict[Any, int]:
        return {}

    def addInPlace(self, a: dict[Any, int], b: dict[Any, int]) -> dict[Any, int]:  # noqa: N802, RUF100  PySpark names it
        a.update(b)
        return a


#: Planned records a read task is worth: a smaller txid reads in fewer tasks than the cores (each task is a round
#: trip to a Python worker, and with one task the process job is one stage: no shuffle by key).
READ_TASK_RECORDS = 10_000


class Reads:
    """Reads a txid's ranges as a DataFrame of records; counts the records read and the undecodable ones.

    ``records_per_task``: a txid reads in one task per this many planned records, up to ``tasks``.
    ``columns``: the fields of ``arrow_schema`` when it has fewer than the spout's; ``planned``: the fewer fields
    a run of the sinks' planned forms reads, the others null (:mod:`app.spark.record_columns`).
    """

    def __init__(self, spark: Any, spout: ArrowSpout, arrow_schema: Any, records_schema: Any,
                 faults: TaskFaults | None, *, columns: tuple[str, ...] | None = None,
                 planned: tuple[str, ...] | None = None) -> None:
        from pyspark.sql.types import StructType

        self.spark, self.spout, self.faults = spark, spout, faults
        self.arrow_schema, self.records_schema = arrow_schema, records_schema
        self.columns = columns  # the columns read when the sinks use fewer than the spout has (None: all)
        self.planned = planned  # the columns a planned run reads when fewer than ``columns`` (None: the same)
        if planned is not None:
            self._planned_arrow = pa.schema([f for f in arrow_schema if f.name in planned])
            self._planned_records = StructType([f for f in records_schema.fields if f.name in planned])
            self._padding = padded(records_schema, planned)  # Columns: resolved anew by each txid's select
        self.tasks = 1  # read tasks per txid at most: chosen from the executors before every txid
        self.records_per_task = READ_TASK_RECORDS
        self.counts = spark.sparkContext.accumulator({}, RangeCounts())
        self.bad = spark.sparkContext.accumulator({}, bad_record_finding.SeenBadRecords())

    def records(self, batch: Batch, ranges: list[Any], rows: Any = None, *, counted: bool = True,
                spread: bool = False, planned: bool = False) -> Any:
        """The records of ``ranges``: one Spark partition per group of :func:`pack_ranges`, each range read once.
        ``planned``: for a run of the sinks' planned forms, which reads only the columns those plans use (unless
        ``rows`` filters the records: a filter finds them by offset).

        A task per range would cost a Python task each (a round trip to a worker, tens of ms) for no
        more parallelism than the executors' cores give: a txid of 32 partitions on 4 cores reads in 4,
        and a txid of fewer than :data:`READ_TASK_RECORDS` planned records in one. ``spread``: a task per core
        whatever the records (the result is then shuffled into every commit partition).
        """
        fewer = planned and rows is None and self.planned is not None
        records = sum(max(1, m.record_count) for m in ranges)
        per_task = 1 if spread else max(1, self.records_per_task)
        groups = pack_ranges(ranges, min(self.tasks, -(-records // per_task)))
        read = ReadRanges(self.spout, self._planned_arrow if fewer else self.arrow_schema, groups, batch.txid,
                          batch.attempt, self.counts if counted else None, self.faults, self.bad if counted else None,
                          rows, self.planned if fewer else self.columns)
        tasks = self.spark.range(0, len(groups), 1, len(groups))
        if not fewer:
            return tasks.mapInArrow(read, self.records_schema)
        return tasks.mapInArrow(read, self._planned_records).select(*self._padding)

    def take_counts(self, batch: Batch) -> int:
        """Records read by ``batch`` (and forget older entries of the accumulator)."""
        counts = self.counts.value
        mine = [k for k in list(counts) if k[:2] == (batch.txid, batch.attempt)]
        total = sum(counts.get(k, 0) for k in mine)
        for k in mine:
            counts.pop(k, None)
        return int(total)

    def take_bad(self, batch: Batch) -> list[BadRecord]:
        """Records ``batch``'s reads could not decode (and forget older entries of the accumulator)."""
        seen = self.bad.value
        mine = [k for k in list(seen) if k[:2] == (batch.txid, batch.attempt)]
        return [r for k in mine for r in seen.pop(k, ())]

    def forget(self, which: Callable[[int, int], bool]) -> None:
        """Drop the counts of the (txid, attempt) pairs ``which`` says."""
        counts = self.counts.value
        for k in [k for k in list(counts) if which(k[0], k[1])]:
            counts.pop(k, None)
        seen = self.bad.value
        for k in [k for k in list(seen) if which(k[0], k[1])]:
            seen.pop(k, None)


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
