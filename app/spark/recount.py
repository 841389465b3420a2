"""A recount of source ranges through a pipeline's own Spark plan, into a shadow kept on the driver.

The ranges go through :meth:`app.spark.executor.SparkExecutor.process` exactly as a txid's do (the
same read tasks, transforms, bad-record handling and aggregation), as one batch that is never
frozen, settled nor committed: its results are collected to the driver and released, and no state
is opened for writing. Aggregating all the ranges at once gives each key the value the stored
table holds after the txids that read them, because every aggregator combines associatively.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.batch import Batch
from app.topology import Topology
from spouts.bad_records import BadRecord
from spouts.metadata import BatchPlan

Key = tuple[Any, ...]


@dataclass
class SinkCount:
    """One sink's recount: the partial per key (as a commit would combine it) for the table ``spec``."""

    compiled: Any  # app.spark.plan.CompiledSink
    partials: dict[Key, Any] = field(default_factory=dict)


@dataclass
class Recount:
    """What the ranges hold, counted: records read, the bad records left out, each sink's partials."""

    records: int
    bad_records: tuple[BadRecord, ...]
    sinks: tuple[SinkCount, ...]


class Recounter:
    """Recounts ranges with ``topology``'s own Spark plan (compiled once: its sinks' table specs are known before
    anything is read); ``close`` releases what Spark still holds."""

    def __init__(self, spark: Any, topology: Topology) -> None:
        from prometheus_client import CollectorRegistry

        from app.metrics import Metrics
        from app.spark.executor import SparkExecutor

        # metrics of its own: a recount's reads and jobs are not the pipeline's (the service exports those)
        self.executor = SparkExecutor(spark, topology, metrics=Metrics(CollectorRegistry()))

    @property
    def sinks(self) -> tuple[Any, ...]:
        """The compiled sinks (:class:`app.spark.plan.CompiledSink`), with the table spec each one writes."""
        return self.executor.sinks

    def count(self, plan: BatchPlan, *, keep: Callable[[Key], bool] | None = None) -> Recount:
        """Read and aggregate ``plan``'s ranges as one batch; ``keep``: the keys wanted (all when None), filtered on
        the driver as rows arrive."""
        from states.snapshottable import GLOBAL_KEY

        batch = Batch(plan.txid, 1, plan, frozen=True)  # no progress log: nothing is stored for it
        processed = self.executor.process(batch)
        try:
            sinks = []
            for r in processed.sinks:
                c = r.compiled
                count = SinkCount(c)
                if not r.keyed:
                    if r.partial is not None:
                        count.partials[GLOBAL_KEY] = r.partial
                else:
                    for rb in r.arrow().select([*c.keys, *c.values]).to_batches():
                        keys = zip(*(rb.column(k).to_pylist() for k in c.keys), strict=True)
                        columns = [rb.column(v).to_pylist() for v in c.values]
                        values = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
                        for k, v in zip(keys, values, strict=True):
                            if keep is None or keep(k):
                                count.partials[k] = v
                sinks.append(count)
            return Recount(processed.records, processed.bad_records, tuple(sinks))
        finally:
            self.executor.close()

    def close(self) -> None:
        self.executor.close()
