"""One pipeline in the service: its coordinator loop in a thread of its own, its lease role (leader or
standby, a standby's warm-up), and the status ``/readyz`` reports of it (:mod:`app.service.health`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.config import CompiledPipeline
from app.coordinator.coordinator import FATAL, Coordinator
from app.coordinator.loop import Callbacks
from app.coordinator.progress import read_progress
from app.failures.error_text import describe
from app.failures.policy import FAILED, fatal_cause
from app.metrics import METRICS, Metrics
from app.service.health import Health, PipelineState, assess
from app.service.kafka_watch import KafkaWatch
from app.topology.batch import BatchExecutor, WarmsUp
from states.errors import LeaseNotRenewedError
from states.protocols import LeaseInfo

log = logging.getLogger("app.service")  # the service's lines, under the name operators filter on

WARM_EVERY_S = 30.0  # a standby re-warms its executor this often (Spark stops Python workers idle for 60 s)
WARM_RECORDS = 200  # per partition: what a standby's warm-up reads of the plan it would replay


class PipelineRunner:
    """One pipeline's coordinator loop, in its own thread, with the status ``/readyz`` reports."""

    def __init__(self, compiled: CompiledPipeline, executor: BatchExecutor, *, metrics: Metrics = METRICS,
                 clock: Callable[[], float] = time.monotonic, kafka_watch: KafkaWatch | None = None) -> None:
        self.compiled, self._clock = compiled, clock
        self.kafka_watch = kafka_watch  # asks Kafka on its own: an outage shows while a txid still waits on it
        self.id = compiled.id
        self._executor, self._metrics = executor, metrics
        self.coordinator = self._new_coordinator()
        self.leased = False
        self.standby_since: float | None = None  # waiting for the lease held by another instance
        self.last_progress: float | None = None  # a commit or an idle poll
        self.last_step: float | None = None  # the end of the last step (a commit, an idle poll, a failed attempt)
        self.error: BaseException | None = None
        self.stepped_down: tuple[str, float] | None = None  # why the lease was given up, and when (wall clock)
        self._wall_clock = time.time
        self._problem_since: float | None = None  # when the current source problem was first seen
        self._bad_seen: dict[str, int] = {}  # bad records by action at the last commit line
        metrics.set_pipeline_state(self.id, "standby")  # every state's series exists from the start
        metrics.precreate_failures(self.id)
        self.loop_done = threading.Event()
        self.thread = threading.Thread(target=self._main, name=f"pipeline-{self.id}", daemon=True)
        self._stop = threading.Event()  # the service's, from start
        self._on_fatal: Callable[[], None] = lambda: None

    def _new_coordinator(self) -> Coordinator:
        c = self.compiled
        return Coordinator(self.id, c.topology.source(), self._executor, c.store(), c.coordinator,
                           metrics=self._metrics)

    def start(self, stop: threading.Event, on_fatal: Callable[[], None]) -> None:
        """Run the loop until ``stop``; ``on_fatal`` is called (from the loop's thread) if a permanent failure stops it."""
        self._stop, self._on_fatal = stop, on_fatal
        if self.kafka_watch is not None:
            self.kafka_watch.start(stop)
        self.thread.start()

    @property
    def failure_reason(self) -> str | None:
        """The permanent failure's class (:data:`app.failures.policy.CAUSES`), None while the pipeline has not failed."""
        if self.error is None:
            return None
        stopped = self.coordinator.stopped_by
        return stopped.cause if stopped is not None else fatal_cause(self.error)

    @property
    def role(self) -> str:
        """``starting`` (before the first lease attempt), ``standby`` (another instance holds the lease),
        ``active`` (holds it and works), ``stopping`` (the lease was lost) or ``stopped``."""
        if self.loop_done.is_set():
            return "stopped"
        if self.leased:
            return "active" if self.coordinator.holds_lease else "stopping"
        return "standby" if self.standby_since is not None else "starting"

    @property
    def exit_code(self) -> int:
        """The code this pipeline's stop asks the process to exit with (0 while it has not failed)."""
        if self.error is None:
            return 0
        stopped = self.coordinator.stopped_by
        return FAILED if stopped is None else stopped.exit_code

    def health(self, window_s: float) -> Health:
        """The pipeline's state for ``/readyz`` (see :mod:`app.service.health`); also published as ``trident_pipeline_state``."""
        age = None if self.last_progress is None else self._clock() - self.last_progress
        c = self.coordinator
        error = None
        if self.error is not None:
            error = c.stopped_by.reason if c.stopped_by is not None else describe(self.error)
        failing = None if c.degraded is None else (c.degraded.reason, c.degraded.since)
        problem, since = c.source_problem, None
        watch = self.kafka_watch
        if problem is None and watch is not None and watch.problem is not None:
            problem, since = watch.problem, watch.since
        if problem is None:
            self._problem_since = None
        elif self._problem_since is None:
            self._problem_since = since or self._wall_clock()  # first seen now: /readyz says since when
        if error is None and not self.leased and self.stepped_down is not None:
            h = Health(PipelineState.DEGRADED, *self.stepped_down)  # no lease, but not a standby: the store is away
        else:
            h = assess(active=self.role == "active", error=error, failing=failing, source_problem=problem,
                       progress_age_s=age, window_s=window_s, now=self._wall_clock(),
                       source_problem_since=self._problem_since)
        self._metrics.set_pipeline_state(self.id, h.state.value)
        return h

    def stalled_s(self) -> float | None:
        """Seconds since this pipeline, holding its lease, last finished a step; None when it holds no lease."""
        if self.role != "active" or self.last_step is None:
            return None
        return self._clock() - self.last_step

    def status(self, window_s: float) -> dict[str, Any]:
        age = None if self.last_progress is None else self._clock() - self.last_progress
        h = self.health(window_s)
        return {"ready": h.ready, **h.to_json(), "role": self.role, "lease_held": self.leased,
                "committed_txid": self.coordinator.committed_txid, "data_loss": self.coordinator.last_data_loss,
                "seconds_since_progress": None if age is None else round(age, 3),
                "error": h.reason if h.state.value == "failed" else None}

    def _main(self) -> None:
        try:
            while self._lead():
                self._step_down()
        except BaseException as e:
            self.error = e
            stopped = self.coordinator.stopped_by
            log.error("pipeline %s stopped (exit code %d): %s", self.id, self.exit_code,
                      describe(e) if stopped is None else stopped.reason,
                      exc_info=stopped is None and not _is_expected_fatal(e))
            self._metrics.set_pipeline_state(self.id, "failed")
            self._metrics.pipeline_failures.labels(self.id, self.failure_reason).inc()
            self._on_fatal()
        finally:
            self.loop_done.set()
            self.coordinator.close(release=self.leased)
            self.leased = False
            if self.coordinator.epoch is None:
                log.info("pipeline %s stopped in standby (it never held the lease)", self.id)
            else:
                log.info("pipeline %s closed at committed txid %d", self.id, self.coordinator.committed_txid)

    def _lead(self) -> bool:
        """Take the lease (or wait for it as a standby) and commit until stopped. True when the lease could not be
        renewed because the store did not answer (:class:`LeaseNotRenewedError`): the caller steps down."""
        if self._stop.is_set():
            return False  # stopped before the lease attempt: no lease is taken
        if not self.coordinator.start(self._stop, on_standby=self._standby):
            return False  # stopped while in standby
        self.leased, self.standby_since, self.stepped_down = True, None, None
        self.last_step = self._clock()  # a stall is counted from the lease on
        self._metrics.set_pipeline_state(self.id, "degraded")  # until the first step finishes
        try:
            self.coordinator.run(self._stop, callbacks=Callbacks(on_commit=self._committed,
                                                                 on_idle=self._progressed,
                                                                 on_failure=self._failed_step))
        except LeaseNotRenewedError as e:
            if self._stop.is_set():
                raise
            why = e.reason.split(";")[0]
            reason = (f"stepped down: the lease could not be renewed ({why}); it takes the lease again and resumes "
                      "from what is committed once the state store answers")
            log.error("pipeline %s %s", self.id, reason)
            self.stepped_down = (reason, self._wall_clock())
            return True
        return False

    def _step_down(self) -> None:
        """After a lease that could not be renewed: drop everything the coordinator held in memory (in-flight
        txids, caches, clients) and start over with a new one, as a process restart would, without Spark's start."""
        old = self.coordinator
        old.close(release=False)  # the store did not answer: the lease expires by itself
        self.leased, self.standby_since = False, self._clock()
        self._metrics.set_pipeline_state(self.id, "standby")
        self.coordinator = self._new_coordinator()
        self.coordinator.committed_txid = old.committed_txid  # what /readyz shows until the lease is taken again

    def _standby(self, holder: LeaseInfo | None) -> None:
        if self.standby_since is None:
            self.standby_since = self._clock()
            executor = self.coordinator.executor
            if isinstance(executor, WarmsUp):
                threading.Thread(target=self._warm_while_standby, args=(executor,), name=f"warm-{self.id}",
                                 daemon=True).start()

    def _warm_while_standby(self, executor: WarmsUp) -> None:
        """Keep the executor warm while this instance waits, so a takeover starts with a warm txid.

        Every :data:`WARM_EVERY_S` (Spark stops a Python worker idle for a minute): the first records of
        the txid a takeover replays (the frozen one, else the last committed one) are read and
        aggregated and the state sessions opened, writing nothing. A failure only means a colder takeover.
        """
        failed = warmed = False
        while not self._stop.is_set() and self.coordinator.epoch is None and not self.loop_done.is_set():
            try:
                progress = read_progress(self.coordinator.store)
                plan = progress.frozen.plan if progress.frozen is not None else progress.committed_plan
                if plan is not None:
                    t0 = self._clock()
                    executor.warm_up(plan.head(WARM_RECORDS))
                    if not warmed:
                        log.info("pipeline %s: standby warmed up on txid %d in %.0f ms (again every %.0f s)",
                                 self.id, plan.txid, (self._clock() - t0) * 1000, WARM_EVERY_S)
                    warmed = True
            except Exception as e:  # noqa: BLE001 - best effort: the takeover is only slower
                if not failed:
                    log.info("pipeline %s: warming up the standby failed (a takeover starts cold): %s", self.id,
                             describe(e))
                failed = True
            self._stop.wait(WARM_EVERY_S)

    def _progressed(self) -> None:
        self.last_progress = self.last_step = self._clock()
        self._metrics.set_pipeline_state(self.id, "degraded" if self.coordinator.source_problem else "active")

    def _failed_step(self, failures: int) -> None:
        self.last_step = self._clock()
        self._metrics.set_pipeline_state(self.id, "degraded")

    def _committed(self, seconds: float) -> None:
        self._progressed()
        c = self.coordinator
        bad = self._bad_records_so_far()
        skipped, dead = (bad.get(a, 0) - self._bad_seen.get(a, 0) for a in ("skip", "dead_letter"))
        self._bad_seen = bad
        records = c.last_stats.records
        log.info("pipeline %s committed txid %d: %d records (%d counted, %d skipped, %d dead-lettered), %d keys, "
                 "%.0f ms", self.id, c.committed_txid, records, max(0, records - skipped - dead), skipped, dead,
                 c.last_stats.keys_updated, seconds * 1000)

    def _bad_records_so_far(self) -> dict[str, int]:
        """This pipeline's bad records by action, as counted by ``trident_bad_records_total`` (once per txid)."""
        out: dict[str, int] = {}
        for metric in self._metrics.bad_records.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("pipeline") == self.id:
                    action = sample.labels["action"]
                    out[action] = out.get(action, 0) + int(sample.value)
        return out


def _is_expected_fatal(e: BaseException) -> bool:
    return isinstance(e, FATAL)
