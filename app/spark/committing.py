"""The commit step: each sink's processed result applied to its state as a txid, by commit tasks or on the driver.

A keyed result of fewer than ``driver_keys`` keys is committed on the driver: its rows are collected as
Arrow (by the process job itself when the txid's keys are expected to be few or are unsure, see
:meth:`Commits.collects`, else from the cache by a Spark job without a Python task) and the commit
task's own code runs on them in the driver process. A commit job costs a Python task per commit
partition, empty ones included (a round trip to a Python worker each), which is most of a small
txid's commit. The driver keeps the
sink's cache in memory between its commits (:class:`~app.spark.tasks.DriverCache`); like the
partitions' files, it is trusted only when saved by the sink's previous commit, so a switch between
the two paths finds the other's cache older and reads its keys once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from prometheus_client import REGISTRY

from app.failures import spark_fatal as fatal
from app.metrics import Metrics
from app.spark.processing import COLLECT_ALL, SinkResult
from app.spark.sharding import by_shard
from app.spark.state_tables import StateTables
from app.spark.tasks import CommitAggregates, DriverCache, PersistRows, TaskFaults
from app.topology.batch import Batch
from app.topology.topology import PartitionPersist
from states.aggregators import combine_updater
from states.errors import StateTableMissingError
from states.snapshottable import SnapshottableMap

#: Keyed results of fewer keys are committed on the driver (unless the session's :data:`DRIVER_COMMIT_KEYS_CONF` says).
DRIVER_COMMIT_KEYS = 2_000
DRIVER_COMMIT_KEYS_CONF = "spark.trident.driverCommitKeys"


class Commits:
    """Commits sinks' results; keeps the txid of each keyed sink's last commit (the caches its next may trust).

    ``driver_keys``: keyed results of fewer keys are committed on the driver (0: always by commit tasks).
    """

    def __init__(self, tables: StateTables, stats_schema: Any, faults: TaskFaults | None, metrics: Metrics,
                 driver_keys: int = DRIVER_COMMIT_KEYS) -> None:
        self.tables, self.stats_schema, self.faults, self.metrics = tables, stats_schema, faults, metrics
        self.driver_keys = driver_keys
        self.last_commit: dict[str, int] = {}  # keyed sink -> the txid its last commit finished
        self.driver_caches: dict[str, DriverCache] = {}  # keyed sink -> its cache between commits on the driver
        self._keys_per_record: float | None = None  # the largest keyed result of the last txid processed, per record
        self._last_keys = 0  # the keys of that result

    def collects(self, batch: Batch, planned: int) -> int:
        """Below how many rows ``batch``'s keyed results are collected to the driver by its process job (then
        committed there with no Spark job).

        :data:`~app.spark.processing.COLLECT_ALL` (collected whatever their rows, not cached) when planned with
        fewer records than ``driver_keys``, or with fewer keys expected at the keys per record of the last txid
        processed (over a bounded key space that ratio falls as a txid grows, so the guess errs high).
        ``driver_keys`` (cached, and collected by the same job when fewer) when more keys are expected but the
        last txid had fewer, or there was none: a txid larger than the last may hold about as many keys. 0
        (cached) otherwise, and for a replay: a result too large for the driver fails its first attempt only.
        """
        if batch.attempt > 1 or self.driver_keys <= 0:
            return 0
        if planned < self.driver_keys or (self._keys_per_record is not None
                                          and planned * self._keys_per_record < self.driver_keys):
            return COLLECT_ALL
        return self.driver_keys if self._last_keys < self.driver_keys else 0

    def processed(self, planned: int, results: Sequence[SinkResult]) -> None:
        """Learn the keys of a txid just processed, and its keys per planned record (see :meth:`collects`)."""
        if planned:
            self._last_keys = max((r.keys for r in results if r.keyed), default=0)
            self._keys_per_record = self._last_keys / planned

    def sink(self, r: SinkResult, batch: Batch, partitions: int) -> int:
        """Apply ``r`` as txid ``batch.txid``; returns the keys written."""
        if r.compiled.is_global:
            return self._global(r, batch)
        if not r.keys:
            return 0
        c = r.compiled
        task = self._task(r, batch, partitions)
        if isinstance(task, CommitAggregates) and (r.collected is not None or r.keys < self.driver_keys):
            cache = self.driver_caches.setdefault(c.sink.name, DriverCache())
            stats = self._on_driver(replace(task, driver_cache=cache), r)
        else:
            frame = r.frame  # partitioned by key: one stage, no shuffle after the process job's
            if isinstance(task, CommitAggregates) and (shards := c.sink.factory.shards_of(c.spec.table)):
                frame = by_shard(frame, c.spec, shards, partitions)  # a shard's batches never contend
            stats = frame.mapInArrow(task, self.stats_schema).collect()
            for row in stats:
                self._add_metrics(row["metrics"])
        for row in stats:
            if row["fatal"] is not None:  # a task met a batch behind the state: stop, do not replay
                raise fatal.decode(row["fatal"])
        if not isinstance(c.sink, PartitionPersist):
            self.last_commit[c.sink.name] = batch.txid  # the cache files its next commit may trust
        return sum(row["keys"] for row in stats)

    def _global(self, r: SinkResult, batch: Batch) -> int:
        """A global aggregate's partial applied on the driver, through a one-key map."""
        c = r.compiled
        if r.partial is None:
            return 0
        if c.aggregator is None:
            msg = f"sink {c.sink.name!r}: a global aggregate without an aggregator"
            raise TypeError(msg)
        try:
            state = SnapshottableMap(c.sink.factory.make_state(c.spec, committed_txid=self.tables.committed_into(c, batch)))
            state.begin_commit(batch.txid)
            state.update(combine_updater(c.aggregator, r.partial))
            state.commit(batch.txid)
        except StateTableMissingError as e:
            c.sink.factory.forget(c.spec)  # opened on a table now gone: the next open checks again
            raise e.after(batch.txid - 1) from e
        return 1

    def _task(self, r: SinkResult, batch: Batch, partitions: int) -> CommitAggregates | PersistRows:
        """The commit task of a keyed or ``partition_persist`` sink's result."""
        c = r.compiled
        committed = self.tables.committed_into(c, batch)
        if isinstance(c.sink, PartitionPersist):
            return PersistRows(c.sink.factory, c.spec, c.sink.updater, batch.txid, batch.attempt, self.faults,
                               committed)
        if c.aggregator is None:
            msg = f"sink {c.sink.name!r}: a keyed aggregate without an aggregator"
            raise TypeError(msg)
        # the frame is partitioned by key; each row names its commit partition, hence its cache
        return CommitAggregates(c.sink.factory, c.spec, c.aggregator, batch.txid, batch.attempt, faults=self.faults,
                                partitions=partitions, previous=self.last_commit.get(c.sink.name),
                                committed=committed)

    def _on_driver(self, task: CommitAggregates, r: SinkResult) -> list[dict[str, Any]]:
        """``task`` run in this process on ``r``'s rows (no Python task; a Spark job unless collected): its stats.

        The states it opens count into this process's metrics already; a test's own registry gets the deltas."""
        rows = [row for out in task(iter(r.arrow().to_batches())) for row in out.to_pylist()]
        if self.metrics.registry is not REGISTRY:
            for row in rows:
                self._add_metrics(row["metrics"])
        return rows

    def _add_metrics(self, deltas: str) -> None:
        for attr, labels, delta in json.loads(deltas):
            counter = getattr(self.metrics, attr)
            (counter.labels(**labels) if labels else counter).inc(delta)


def driver_commit_keys(spark: Any) -> int:
    """The session's ``spark.trident.driverCommitKeys`` (set in the config's ``spark.conf``), else
    :data:`DRIVER_COMMIT_KEYS`."""
    return int(spark.conf.get(DRIVER_COMMIT_KEYS_CONF, str(DRIVER_COMMIT_KEYS)))
