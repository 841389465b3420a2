"""``python -m app run``: Spark, one coordinator thread per pipeline, the HTTP endpoints, clean shutdown.

Lifecycle of the process:

1. Install SIGTERM/SIGINT handlers (a signal during start-up still exits cleanly) and serve
   ``/metrics``, ``/healthz`` and ``/readyz`` (every pipeline ``starting``); check that Kafka and
   Cassandra accept the service's principals and settings (:mod:`app.service.access`: a refusal or a wrong
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
failures keep the process alive and ``/readyz`` says ``degraded`` (:mod:`app.service.health`). So does a lease
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

from app.config import ServiceConfig, compile_pipeline, spout_config
from app.failures.error_text import describe
from app.failures.policy import BAD_INPUT, FAILED
from app.failures.refusals import refusal
from app.metrics import METRICS, Metrics
from app.service.access import StartupError, check_access
from app.service.kafka_watch import KafkaWatch
from app.service.pod_resources import sized_spark
from app.service.runner import PipelineRunner
from app.topology.batch import BatchExecutor
from app.topology.topology import Topology

if TYPE_CHECKING:  # PySpark starts a JVM: imported only once the service starts Spark
    from pyspark.sql import SparkSession

    from app.audit.schedule import AuditSchedule
    from app.service.endpoints import HttpServer

log = logging.getLogger("app.service")  # the service's lines, under the name operators filter on

ExecutorFactory = Callable[["SparkSession", Topology], BatchExecutor]


__all__ = ["Service", "StartupError"]


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
            else:  # a credential, grant or certificate a server refused (app.service.access): one line, no traceback
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
        from app.spark import executor_watch

        executor_watch.watch(self.spark, s.executors_gone_s, self.metrics.spark_executors)  # cluster masters only

    def _start_http(self) -> None:
        h = self.config.http
        if h.enabled:
            from app.service.endpoints import HttpServer

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
        """The partition-size gauges of the pipeline's sharded tables, while it holds the lease (app.service.partition_watch)."""
        from app.service.partition_watch import PartitionWatch, sharded_tables
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
                from app.spark import executor_watch

                executor_watch.unwatch(self.spark)
                self.spark.stop()
            except Exception:
                log.warning("Spark did not stop cleanly", exc_info=True)
        log.info("stopped")


def _spark_executor(spark: SparkSession, topology: Topology) -> BatchExecutor:
    from app.spark.batch_executor import SparkExecutor

    return SparkExecutor(spark, topology)
