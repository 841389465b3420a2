"""Job control: a txid's Spark jobs grouped (to cancel them) and pooled, and the task counts chosen from the executors."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.spark import parallelism as parallelism_
from app.topology.batch import Batch

#: The executor's log (these lines are the executor's, wherever its parts live).
log = logging.getLogger("app.spark.batch_executor")


class JobControl:
    """Names and pools a topology's Spark jobs by txid and phase, and follows the executors' parallelism."""

    def __init__(self, spark: Any, name: str, read_tasks: int | None, commit_partitions: int | None) -> None:
        self.spark, self.name = spark, name
        self._given = (read_tasks, commit_partitions)
        self._keep_shuffle = parallelism_.user_shuffle_partitions(spark)
        self.parallelism: parallelism_.Parallelism | None = None

    def follow_executors(self) -> parallelism_.Parallelism:
        """Choose the read and commit tasks (and the shuffle partitions) from the executors running now;
        log the choice when it is made and whenever it changes."""
        read_tasks, commit_partitions = self._given
        previous = self.parallelism
        chosen = parallelism_.choose(parallelism_.observe(self.spark), previous, read_tasks=read_tasks,
                                     commit_partitions=commit_partitions, keep_shuffle=self._keep_shuffle)
        if chosen == previous:
            return chosen
        if chosen.shuffle_partitions is not None:
            self.spark.conf.set(parallelism_.SHUFFLE_PARTITIONS, str(chosen.shuffle_partitions))
        self.parallelism = chosen
        if previous is None:
            configured = "" if chosen.shuffle_partitions is not None else \
                f": {self.spark.conf.get(parallelism_.SHUFFLE_PARTITIONS)}"
            log.info("topology %s: parallelism %s%s", self.name, chosen.describe(), configured)
        else:
            log.info("topology %s: the executors changed, parallelism now %s (was %s)", self.name,
                     chosen.describe(), previous.describe())
        return chosen

    def group(self, txid: int) -> str:
        """The job group of ``txid``'s jobs."""
        return f"{self.name}:txid-{txid}"

    @contextmanager
    def job(self, batch: Batch, phase: str) -> Iterator[None]:
        """Run the jobs started inside in ``batch``'s job group and in scheduler pool ``phase``."""
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group(batch.txid), f"{self.name} txid {batch.txid} attempt {batch.attempt}: "
                       f"{phase}", interruptOnCancel=True)
        sc.setLocalProperty("spark.scheduler.pool", phase)
        try:
            yield
        finally:
            sc.setLocalProperty("spark.scheduler.pool", None)

    def cancel(self, txid: int) -> None:
        """Cancel the running Spark jobs of ``txid``."""
        self.spark.sparkContext.cancelJobGroup(self.group(txid))
