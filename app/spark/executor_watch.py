"""Executors gone is visible: a cluster master with no executor for longer than a bound says so.

Spark waits for executors without a word: a txid submitted while every worker is down waits, and
nothing fails. :class:`ExecutorWatch` counts the registered executors every few seconds, publishes
the count (``trident_spark_executors``), logs when none has run for longer than the bound and when
they return, and gives the reason ``/readyz`` shows for each pipeline until they do. A local master
needs no watch: its executors are the driver's own threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.spark.jvm import java_context
from app.spark.masters import is_local

log = logging.getLogger(__name__)

DEFAULT_BOUND_S = 60.0
_watches: dict[int, ExecutorWatch] = {}  # id(SparkContext) -> its watch (one per driver process)


class ExecutorWatch:
    """Counts executors with ``count`` (None: unknown now, nothing changes) and says when there were none for
    longer than ``bound_s``. ``gauge``: where the count goes (a prometheus Gauge, or None)."""

    def __init__(self, count: Callable[[], int | None], bound_s: float = DEFAULT_BOUND_S, gauge: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if bound_s <= 0:
            msg = "the bound on executors gone must be > 0 seconds"
            raise ValueError(msg)
        self.count, self.bound_s, self.gauge, self._clock = count, bound_s, gauge, clock
        self.executors: int | None = None
        self._none_since: float | None = None
        self._reported = False
        self._stop = threading.Event()

    def poll(self) -> None:
        """Count the executors now; log crossing the bound and the return of executors once each."""
        n = self.count()
        if n is None:
            return
        self.executors = n
        if self.gauge is not None:
            self.gauge.set(n)
        now = self._clock()
        if n > 0:
            if self._reported:
                log.warning("Spark executors are back (%d) after %.0f s without any", n, now - (self._none_since or now))
            self._none_since, self._reported = None, False
            return
        if self._none_since is None:
            self._none_since = now
        if not self._reported and now - self._none_since > self.bound_s:
            self._reported = True
            log.error("%s", self.problem)

    @property
    def problem(self) -> str | None:
        """Why the pipelines cannot progress: no executor for longer than the bound (None: executors run)."""
        if self._none_since is None:
            return None
        gone = self._clock() - self._none_since
        if gone <= self.bound_s:
            return None
        return (f"no Spark executor for {gone:.0f} s (the bound is {self.bound_s:.0f} s): the cluster's workers are "
                "down or have no free cores or memory for this application")

    def start(self, interval_s: float = 5.0) -> ExecutorWatch:
        """Poll every ``interval_s`` in a daemon thread until :meth:`stop`."""
        def run() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.poll()
                except Exception:
                    log.debug("could not count the Spark executors", exc_info=True)

        self.poll()
        threading.Thread(target=run, name="executor-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()


def registered_executors(spark: Any) -> int:
    """How many executors have registered with the driver now (the driver itself is not one)."""
    return int(java_context(spark).getExecutorIds().size())


def watch(spark: Any, bound_s: float = DEFAULT_BOUND_S, gauge: Any = None) -> ExecutorWatch | None:
    """Start the watch of ``spark``'s executors (once per SparkContext); None for a local master.
    ``gauge``: the family labelled by ``master``, whose series for this master exists only from here on."""
    sc = spark.sparkContext
    if is_local(sc.master):
        return None
    if id(sc) not in _watches:
        series = None if gauge is None else gauge.labels(master=sc.master)
        _watches[id(sc)] = ExecutorWatch(lambda: registered_executors(spark), bound_s, series).start()
    return _watches[id(sc)]


def problem(spark: Any) -> str | None:
    """The watch's reason for ``spark`` (None: no watch, or executors run)."""
    w = _watches.get(id(spark.sparkContext))
    return None if w is None else w.problem


def unwatch(spark: Any) -> None:
    """Stop the watch of ``spark``'s executors (before the session stops)."""
    w = _watches.pop(id(spark.sparkContext), None)
    if w is not None:
        w.stop()
