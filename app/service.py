"""``python -m app run``: Spark, one coordinator thread per pipeline, the HTTP endpoints, clean shutdown.

Lifecycle of the process:

1. Install SIGTERM/SIGINT handlers (a signal during start-up still exits cleanly) and serve
   ``/metrics``, ``/healthz`` and ``/readyz`` (every pipeline ``starting``); check that Kafka and
   Cassandra accept the service's principals and settings (:mod:`app.access`: a refusal or a wrong
   setting exits 2 at once, in one line; Cassandra away is waited for, under ``outage_limit_s``); start
   Spark, then install the handlers again (PySpark replaces SIGINT's handler while it starts). A signal
   before the pipelines start exits 0 without taking a lease.
2. Per pipeline: compile the config, open its state store, build a :class:`~app.coordinator.coordinator.Coordinator`
   over a Spark executor and run it in its own thread: it takes the lease, or waits as a standby
   (not ready, ``role: standby``) while another instance holds it, and takes over when that lease
   is released or expires (:mod:`app.coordinator.lease`).
3. On SIGTERM/SIGINT each pipeline finishes the txid it is committing (up to
   ``service.shutdown_grace_s``); then every Spark job still running is cancelled: later txids
   that were only being processed, or a txid past its grace, are abandoned. An abandoned txid that
   was frozen but not committed is replayed from its frozen ranges by the next run; that is the
   batch protocol's normal recovery, so abandoning is safe. Coordinators release their leases
   (a successor starts at once), Spark stops, and the process exits 0.

A failure the policy calls permanent (:mod:`app.failures.policy`: data loss with policy ``fail``, a lost
lease, a batch behind the state, configuration that only shows at run time) stops that pipeline:
its state is ``failed`` (``/readyz`` names it and the reason), ``trident_pipeline_failures_total``
counts it by reason. What happens next is ``service.on_pipeline_failure``: ``isolate`` (the
default) lets the other pipelines go on and the process exits once every pipeline has stopped;
``exit`` stops every pipeline at once, as a process with one pipeline would. Either way the exit
code is the failed pipelines' highest (1, or 2 for configuration), also after a later signal, so
the orchestrator restarts the pod; a start-up error (e.g. the HTTP port in use) exits 2, any other
error at start 1, each in one line (its traceback at DEBUG: ``run --debug``). Transient
failures keep the process alive and ``/readyz`` says ``degraded`` (:mod:`app.health`). So does a lease
that could not be renewed because the store did not answer (a quorum of Cassandra replicas away): the
pipeline steps down, drops what it held in memory, contends for the lease again and resumes from what is
committed once the store answers, without a process restart; a lease another instance took stays permanent.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.access import StartupError, check_access
from app.config import CompiledPipeline, ServiceConfig, compile_pipeline, spout_config
from app.coordinator.coordinator import FATAL, Coordinator
from app.coordinator.loop import Callbacks
from app.coordinator.progress import read_progress
from app.failures.error_text import describe
from app.failures.policy import BAD_INPUT, FAILED, fatal_cause
from app.failures.refusals import refusal
from app.health import Health, PipelineState, assess
from app.kafka_watch import KafkaWatch
from app.metrics import METRICS, Metrics
from app.pod_resources import sized_spark
from app.topology.batch import BatchExecutor, WarmsUp
from app.topology.topology import Topology
from states.errors import LeaseNotRenewedError
from states.protocols import LeaseInfo

if TYPE_CHECKING:  # PySpark starts a JVM: imported only once the service starts Spark
    from pyspark.sql import SparkSession

    from app.audit.schedule import AuditSchedule
    from app.server import HttpServer

log = logging.getLogger(__name__)

WARM_EVERY_S = 30.0  # a standby re-warms its executor this often (Spark stops Python workers idle for 60 s)
WARM_RECORDS = 200  # per partition: what a standby's warm-up reads of the plan it would replay

ExecutorFactory = Callable[["SparkSession", Topology], BatchExecutor]


__all__ = ["PipelineRunner", "Service", "StartupError"]


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
        """The pipeline's state for ``/readyz`` (see :mod:`app.health`); also published as ``trident_pipeline_state``."""
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


class Service:
    """Runs every pipeline of a config until stopped; :meth:`run` returns the exit code."""

    def __init__(self, config: ServiceConfig, *, metrics: Metrics = METRICS,
                 executor_factory: ExecutorFactory | None = None) -> None:
        self.config, self.metrics = config, metrics
        self._executor_factory = executor_factory
        self.stop = threading.Event()
        self._fatal = threading.Event()
        self._exit_code = 0
        self.runners: list[PipelineRunner] = []
        self.http: HttpServer | None = None
        self.spark: SparkSession | None = None
        self.audits: AuditSchedule | None = None  # audit.every_s
        self.phase = "checking the servers"  # what start-up is doing, for /readyz until the pipelines run
        self._began = time.time()

    # -- the whole lifecycle ------------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        try:
            self._start_http()  # first: /healthz answers while Spark starts, and the port is ours
            # refused credentials or certificates, a wrong setting, Cassandra away: told (or waited for) before Spark
            check_access(self.config, self.metrics, self.stop)
            if not self.stop.is_set():
                self.phase = "starting Spark"
                self._start_spark()
                self._install_signals()  # PySpark replaced SIGINT's handler while starting
            if not self.stop.is_set():
                self.phase = "starting the pipelines"
                self._start_pipelines()
                while not self.stop.wait(0.2):
                    if self.runners and all(r.loop_done.is_set() for r in self.runners):
                        log.error("every pipeline has stopped: the process exits")
                        break
        except StartupError as e:
            log.error("start-up failed: %s", e)
            self._exit_code = e.exit_code
            self._on_fatal()
        except Exception as e:
            refused = refusal(e, cassandra_role=self.config.cassandra.username if self.config.cassandra else None)
            if refused is None:  # one line; the traceback for whoever runs with --debug
                log.error("start-up failed: %s", describe(e))
                log.debug("start-up failed: the traceback", exc_info=True)
            else:  # a credential, grant or certificate a server refused (app.access): one line, no traceback
                log.error("start-up failed: %s", refused.line)
                self._exit_code = BAD_INPUT
            self._on_fatal()
        finally:
            self._shutdown()
            self._close()
        if not self._fatal.is_set():
            return 0
        return self._exit_code or max((r.exit_code for r in self.runners), default=0) or FAILED

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        window = self.config.service.ready_window_s
        pipelines = {r.id: r.status(window) for r in self.runners}
        for p in self.config.pipelines:  # not running yet: listed from the start, with what the service is doing
            pipelines.setdefault(p.id, {"ready": False, "state": "starting", "reason": self.phase, "since": self._began,
                                        "role": "starting", "lease_held": False, "committed_txid": None,
                                        "seconds_since_progress": None, "error": None})
        standby_ok = self.config.service.standby_ready  # a standby is ready to take over
        ready = bool(pipelines) and not self.stop.is_set() and all(
            p["ready"] or (standby_ok and p["state"] == "standby") for p in pipelines.values())
        failed = sorted(i for i, p in pipelines.items() if p["state"] == "failed")
        return ready, {"stopping": self.stop.is_set(), "failed": failed, "pipelines": pipelines}

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """Alive unless a pipeline holding its lease finished no step for longer than ``service.live_window_s``
        (a hung coordinator: a restart frees its lease for a standby, or retries it here)."""
        bound = self.config.service.live_window_s
        stalled = {r.id: s for r in self.runners if (s := r.stalled_s()) is not None}
        hung = sorted(i for i, s in stalled.items() if s > bound)
        return not hung, {"hung": hung, "live_window_s": bound,
                          "seconds_since_step": {i: round(s, 3) for i, s in stalled.items()}}

    # -- steps ----------------------------------------------------------------------------------

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stop.is_set():
            log.warning("second %s: abandoning the current txids now", signal.Signals(signum).name)
            self._cancel_spark_jobs()
            return
        log.info("%s: finishing the current txid, then stopping", signal.Signals(signum).name)
        self.stop.set()

    def _start_spark(self) -> None:
        s = self.config.spark
        from app.spark.session import spark_session

        for deprecated in s.deprecated():
            log.warning("%s", deprecated)

        master, conf, sized = sized_spark(s.master, dict(s.conf))
        for change in sized:
            log.info("sized to the container: %s", change)
        log.info("starting Spark (master %s)", master)
        self.spark = spark_session(master=master, app_name=s.app_name, conf=conf)
        from app.spark import executors

        executors.watch(self.spark, s.executors_gone_s, self.metrics.spark_executors)  # cluster masters only

    def _start_http(self) -> None:
        h = self.config.http
        if h.enabled:
            from app.server import HttpServer

            try:
                self.http = HttpServer(h.host, h.port, self.readiness, self.metrics.registry,
                                       liveness=self.liveness).start()
            except OSError as e:
                msg = f"http.port {h.port} on {h.host or 'all interfaces'}: {e.strerror or e}"
                raise StartupError(msg) from e

    def _start_pipelines(self) -> None:
        make = self._executor_factory or _spark_executor
        for p in self.config.pipelines:
            if self.stop.is_set():
                return  # a signal while starting: no lease is taken
            compiled = compile_pipeline(self.config, p, metrics=self.metrics)
            compiled.claim_tables()  # a table written by another pipeline: a permanent error, before any batch
            if self.spark is None:
                msg = "the pipelines start after Spark"
                raise RuntimeError(msg)
            executor = make(self.spark, compiled.topology)
            watch = KafkaWatch(spout_config(self.config, p), p.id)
            runner = PipelineRunner(compiled, executor, metrics=self.metrics, kafka_watch=watch)
            self.runners.append(runner)
            log.info("pipeline %s: %s -> %s table %s (%s state), owner %s", p.id,
                     ",".join(p.spout.topics) or f"/{p.spout.topic_pattern}/", p.state.backend,
                     compiled.topology.sinks[0][1].name, p.state.kind.value, compiled.coordinator.owner)
        for r in self.runners:
            if not self.stop.is_set():
                r.start(self.stop, self._on_pipeline_failed)
                self._watch_partitions(r)
        if self.config.audit.every_s is not None and not self.stop.is_set():
            from app.audit.schedule import AuditSchedule

            roles = {r.id: r for r in self.runners}
            self.audits = AuditSchedule(self.config, self.spark, self.metrics,
                                        active=lambda pipeline: roles[pipeline].role == "active")
            self.audits.start(self.stop)

    def _watch_partitions(self, runner: PipelineRunner) -> None:
        """The partition-size gauges of the pipeline's sharded tables, while it holds the lease (app.partition_watch)."""
        from app.partition_watch import PartitionWatch, sharded_tables
        from states.cassandra.session import shared_client

        compiled = runner.compiled
        tables = sharded_tables((sink.factory, sink.name) for _, sink in compiled.topology.sinks)
        if tables:
            settings = compiled.state.cassandra_settings()
            PartitionWatch(runner.id, tables, lambda: shared_client(settings), self.metrics,
                           active=lambda: runner.role == "active").start(self.stop)

    def _on_pipeline_failed(self) -> None:
        """A pipeline stopped for good: the exit code will say so; ``on_pipeline_failure`` decides about the others."""
        self._fatal.set()
        if self.config.service.on_pipeline_failure == "exit":
            log.error("a pipeline failed and service.on_pipeline_failure is exit: stopping every pipeline")
            self.stop.set()
        else:
            running = [r.id for r in self.runners if not r.loop_done.is_set() and r.error is None]
            if running:
                log.warning("a pipeline failed; the others go on (service.on_pipeline_failure: isolate): %s",
                            ", ".join(running))

    def _on_fatal(self) -> None:
        self._fatal.set()
        self.stop.set()

    def _shutdown(self) -> None:
        """Let each pipeline finish its current step (the grace), then cancel what Spark still runs."""
        deadline = time.monotonic() + self.config.service.shutdown_grace_s
        started = [r for r in self.runners if r.thread.ident is not None]
        for r in started:
            if not r.loop_done.wait(max(0.0, deadline - time.monotonic())):
                log.warning("pipeline %s did not finish its txid within %.0f s: abandoning it (it is replayed "
                            "on the next start)", r.id, self.config.service.shutdown_grace_s)
                self.metrics.batches.labels(r.id, "abandoned").inc()
        if started:
            self._cancel_spark_jobs()  # later txids that were only being processed; their results are dropped
        if self.audits is not None:  # a running audit's Spark job was cancelled: it ends at once
            self.audits.join(timeout=60)
        for r in started:
            r.thread.join(timeout=60)
            if r.thread.is_alive():
                log.error("pipeline %s did not stop", r.id)
                self._fatal.set()

    def _cancel_spark_jobs(self) -> None:
        if self.spark is not None:
            try:
                self.spark.sparkContext.cancelAllJobs()
            except Exception:
                log.debug("could not cancel Spark jobs", exc_info=True)

    def _close(self) -> None:
        if self.http is not None:
            self.http.close()
        if self.spark is not None:
            try:
                from app.spark import executors

                executors.unwatch(self.spark)
                self.spark.stop()
            except Exception:
                log.warning("Spark did not stop cleanly", exc_info=True)
        log.info("stopped")


def _spark_executor(spark: SparkSession, topology: Topology) -> BatchExecutor:
    from app.spark.executor import SparkExecutor

    return SparkExecutor(spark, topology)


def _is_expected_fatal(e: BaseException) -> bool:
    return isinstance(e, FATAL)
