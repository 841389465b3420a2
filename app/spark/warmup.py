"""Warming a standby's Spark, so that a takeover does not start with a cold txid.

A standby has its Spark session from start-up, but its first txid after a takeover is still many
times slower than a warm one: the Python workers are forked and import the spout and state
libraries, each worker opens its Kafka consumers and its state session, and Spark generates and
compiles the plan's code. :func:`warm_up` pays for all of that while the instance waits: it runs the
read and aggregation of a stored plan (the frozen txid it will replay, or the last committed one)
as one Spark job, and opens every keyed sink's state on the commit tasks. It writes nothing (no
state, no store, no dead letter, no metric of the pipeline's) and runs under a job group of its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from app.spark.plan import CompiledSink
from app.spark.processing import SinkRuns
from app.spark.reading import Reads
from app.topology.batch import Batch
from app.topology.topology import Topology
from spouts.metadata import BatchPlan
from states.errors import StateTableMissingError
from states.factory import StateFactory
from states.spec import MapSpec

OPENED = pa.schema([pa.field("opened", pa.int64())])


@dataclass(frozen=True)
class OpenState:
    """A commit-side task that opens the sink's state in its worker (the session the commit reuses)."""

    factory: StateFactory
    spec: MapSpec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for _ in batches:
            pass
        try:  # opens this process's backing map once; writes nothing, and never creates the table
            self.factory.make_cached_state(self.spec, create=False)
        except StateTableMissingError:  # not created yet (or gone): the leader's commit says which
            return
        yield pa.record_batch([pa.array([1], pa.int64())], schema=OPENED)


class Warmed(Protocol):
    """What a warm-up uses of the executor it warms (:class:`~app.spark.batch_executor.SparkExecutor`)."""

    @property
    def spark(self) -> Any: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def reads(self) -> Reads: ...

    @property
    def runs(self) -> SinkRuns: ...

    @property
    def records_schema(self) -> Any: ...

    @property
    def sinks(self) -> Sequence[CompiledSink]: ...

    @property
    def commit_partitions(self) -> int: ...


def group(executor: Warmed) -> str:
    return f"{executor.topology.name}:warm-up"


def warm_up(executor: Warmed, plan: BatchPlan) -> int:
    """Read and aggregate ``plan``'s ranges, then open every keyed sink's state on its commit tasks;
    returns how many commit tasks opened a state."""
    from pyspark.sql.pandas.types import from_arrow_schema

    sc = executor.spark.sparkContext
    # job groups are per thread (PySpark's pinned threads): this one is the warming thread's alone
    sc.setJobGroup(group(executor), f"{executor.topology.name}: warm-up of a standby", interruptOnCancel=True)
    ranges = [m for m in plan if not m.empty]
    batch = Batch(plan.txid, 0, plan, frozen=True)  # attempt 0 is never a real attempt
    # a task per core: the result is shuffled into every commit partition, so every commit task opens the state
    records = (executor.reads.records(batch, ranges, counted=False, spread=True,
                                       planned=not executor.runs.checks_rows()) if ranges
               else executor.spark.createDataFrame([], executor.records_schema))
    opened = 0
    for c in executor.sinks:
        result = executor.runs.planned(c, records, executor.commit_partitions)
        if c.is_global:
            result.collect()
        else:
            opened += len(result.mapInArrow(OpenState(c.sink.factory, c.spec), from_arrow_schema(OPENED)).collect())
    return opened

