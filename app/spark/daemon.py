"""PySpark's worker daemon, without a full garbage collection after every task (``spark.python.daemon.module``).

PySpark's daemon (``pyspark.daemon``) forks the Python workers and, in a reused worker, runs
``gc.collect()`` after each task: a full collection of a heap that holds pyarrow, the Kafka and
Cassandra clients and the commit caches, tens of ms of CPU per task and several tasks per txid.
Python's own collections (by allocation thresholds) still run in the workers, so reference cycles
are still freed; here the daemon's full collection runs after every :data:`FULL_EVERY` tasks only.
It also sets up the workers' logging (:func:`app.logs.configure_worker`) once, before it forks them.
"""

from __future__ import annotations

import gc
from typing import Any

#: Tasks of one reused worker between two full collections (PySpark runs one after every task).
FULL_EVERY = 64


class SparseCollector:
    """Stands in for the ``gc`` module inside ``pyspark.daemon``: ``collect()`` is a full collection every
    ``every`` calls, and otherwise a collection of the youngest generation (what the task left just now)."""

    def __init__(self, every: int = FULL_EVERY) -> None:
        self.every, self.calls = max(1, every), 0

    def collect(self, generation: int = 2) -> int:
        self.calls += 1
        return gc.collect(generation if self.calls % self.every == 0 else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)  # anything else the daemon asks of gc


def install(module: Any, every: int = FULL_EVERY) -> None:
    """Make ``module`` (``pyspark.daemon``) collect through a :class:`SparseCollector`."""
    module.gc = SparseCollector(every)


if __name__ == "__main__":  # Spark starts ``python -m app.spark.daemon`` (the session's daemon module)
    from pyspark import daemon

    from app.logs import configure_worker

    configure_worker()  # the workers it forks log as the driver does
    install(daemon)
    daemon.manager()
