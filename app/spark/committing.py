"""The commit step: each sink's processed result applied to its state as a txid, by commit tasks or on the driver."""

from __future__ import annotations

import json
from typing import Any

from app.batch import Batch
from app.metrics import Metrics
from app.spark import fatal
from app.spark.processing import SinkResult
from app.spark.state_tables import StateTables
from app.spark.tasks import CommitAggregates, PersistRows, TaskFaults
from app.topology import PartitionPersist
from states.aggregators import combine_updater
from states.errors import StateTableMissingError
from states.snapshottable import SnapshottableMap


class Commits:
    """Commits sinks' results; keeps the txid of each keyed sink's last commit job (the caches its next may trust)."""

    def __init__(self, tables: StateTables, stats_schema: Any, faults: TaskFaults | None, metrics: Metrics) -> None:
        self.tables, self.stats_schema, self.faults, self.metrics = tables, stats_schema, faults, metrics
        self.last_commit: dict[str, int] = {}  # keyed sink -> the txid its last commit job finished

    def sink(self, r: SinkResult, batch: Batch, partitions: int) -> int:
        """Apply ``r`` as txid ``batch.txid``; returns the keys written."""
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
                                    previous=self.last_commit.get(c.sink.name), committed=committed)
        stats = r.frame.mapInArrow(task, self.stats_schema).collect()  # one stage: no shuffle after process
        for row in stats:
            self._add_metrics(row["metrics"])
        for row in stats:
            if row["fatal"] is not None:  # a task met a batch behind the state: stop, do not replay
                raise fatal.decode(row["fatal"])
        if not isinstance(c.sink, PartitionPersist):
            self.last_commit[c.sink.name] = batch.txid  # the cache files its next commit may trust
        return sum(row["keys"] for row in stats)

    def _add_metrics(self, deltas: str) -> None:
        for attr, labels, delta in json.loads(deltas):
            counter = getattr(self.metrics, attr)
            (counter.labels(**labels) if labels else counter).inc(delta)
