"""Every Prometheus metric of the service: the state and spout layers' own, plus the pipeline's.

The state and spout layers define their metrics themselves (``states.metrics``,
``spouts.metrics``); :class:`Metrics` puts them on one registry next to the pipeline's and keeps
every metric reachable as an attribute. Components take a :class:`Metrics` (default
:data:`METRICS`, on the default registry); tests make their own on a fresh ``CollectorRegistry``
and read values back with :meth:`Metrics.value`. Hand ``metrics.states.bound(pipeline)`` to
states and ``metrics.spouts`` to spouts. Every metric carries the ``pipeline`` label.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from app.failures.policy import CAUSES
from spouts.metrics import SPOUT_METRICS, SpoutMetrics
from states.metrics import STATE_METRICS, StateMetrics

PIPELINE_STATES = ("standby", "active", "degraded", "failed")  # app.service.health.PipelineState
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The service's metrics on one registry: ``states`` and ``spouts`` plus the pipeline's own."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        r = registry
        # The layers' defaults already live on the global registry, which refuses a name twice.
        self.states = STATE_METRICS if r is REGISTRY else StateMetrics(r)
        self.spouts = SPOUT_METRICS if r is REGISTRY else SpoutMetrics(r)
        # The families (every sample labelled by pipeline); states record through bound views of them.
        families = self.states.families
        self.cas_conflicts, self.cas_unknown = families.cas_conflicts, families.cas_unknown
        self.state_requests = families.state_requests
        self.partition_lag = self.spouts.partition_lag
        self.data_loss_events, self.data_loss_offsets = self.spouts.data_loss_events, self.spouts.data_loss_offsets
        self.batches = Counter("trident_batches_total", "Batches by outcome (committed, failed, abandoned).",
                               ["pipeline", "outcome"], registry=r)
        self.committed_txid = Gauge("trident_committed_txid", "Last committed txid.", ["pipeline"], registry=r)
        self.current_txid = Gauge("trident_current_txid", "Highest txid being processed.", ["pipeline"], registry=r)
        self.records = Counter("trident_records_total", "Records in committed batches.", ["pipeline"], registry=r)
        self.keys_updated = Counter("trident_keys_updated_total", "State keys written by committed batches.",
                                    ["pipeline"], registry=r)
        self.phase_seconds = Histogram("trident_phase_seconds", "Latency of batch phases.", ["pipeline", "phase"],
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.replays = Counter("trident_batch_replays_total", "Batch attempts after the first one.", ["pipeline"],
                               registry=r)
        self.lease_held = Gauge("trident_lease_held", "1 while this process holds the coordinator lease.",
                                ["pipeline"], registry=r)
        self.pipeline_state = Gauge("trident_pipeline_state",
                                    "1 for the pipeline's current state (standby, active, degraded, failed), else 0.",
                                    ["pipeline", "state"], registry=r)
        self.bad_records = Counter("trident_bad_records_total", "Bad records by stage (decode, transform, aggregate), "
                                   "reason and the action taken (fail, skip, dead_letter).",
                                   ["pipeline", "stage", "reason", "action"], registry=r)
        self.lease_epoch = Gauge("trident_lease_epoch", "Epoch of the coordinator lease held.", ["pipeline"],
                                 registry=r)
        # labelled so that no series exists until a cluster master's watch sets one: an unlabelled
        # gauge is exported at 0 from the start, which reads as "no executors" on a local master
        self.spark_executors = Gauge("trident_spark_executors", "Executors registered with the driver on a cluster "
                                     "master (absent on a local master, whose executors are the driver's threads).",
                                     ["master"], registry=r)
        # -- Failures that stop a pipeline (the alerts key on them) ---------------------------------
        self.pipeline_failures = Counter(
            "trident_pipeline_failures_total", "Pipelines stopped by a permanent failure, by reason "
            "(app.failures.policy.CAUSES); every reason's series exists from the pipeline's start at 0.",
            ["pipeline", "reason"], registry=r)

        # -- bad-record isolation (app.spark.isolation_report) ---------------------------------------------
        self.isolation_rounds = Counter("trident_isolation_rounds_total", "Rounds of bad-record isolation (each "
                                        "one or more Spark jobs), by the stage the bad records failed at.",
                                        ["pipeline", "stage"], registry=r)
        self.isolation_probes = Counter("trident_isolation_probes_total", "Spark jobs run to isolate bad records, "
                                        "by stage.", ["pipeline", "stage"], registry=r)
        self.isolated_records = Counter("trident_isolated_records_total", "Bad records found by isolation (the "
                                        "records a txid's transforms fail on), by stage.", ["pipeline", "stage"],
                                        registry=r)

        # -- audits (python -m app audit; app.audit) -------------------------------------------------
        self.audit_result = Gauge("trident_audit_last_result", "Result of the pipeline's last audit: 1 every key "
                                  "checked equals the recount, 0 some key differs, is missing or is extra.",
                                  ["pipeline"], registry=r)
        self.audit_differences = Gauge("trident_audit_last_differences", "Keys the last audit found differing, "
                                       "missing or extra.", ["pipeline"], registry=r)
        self.audit_timestamp = Gauge("trident_audit_last_timestamp_seconds", "When the last audit finished (Unix "
                                     "seconds); its age is time() minus this.", ["pipeline"], registry=r)
        self.audit_txid = Gauge("trident_audit_last_txid", "The committed txid the last audit compared as of.",
                                ["pipeline"], registry=r)

        # -- partition size of sharded Cassandra state tables (app.service.partition_watch) ------------------
        self.partition_max_bytes = Gauge(
            "trident_state_partition_max_bytes", "Largest partition of a sharded state table, in bytes, as "
            "Cassandra's SSTables report it (system_views.max_partition_size: whole MiB, the largest over the nodes; "
            "memtables not included). Absent for a table with a partition per key.", ["pipeline", "table"],
            registry=r)
        self.partition_max_rows = Gauge(
            "trident_state_partition_max_rows", "Rows of the largest shard counted so far (one shard counted per "
            "refresh in turn, COUNT(*) of its partition). Absent for a table with a partition per key.",
            ["pipeline", "table"], registry=r)

    def record_commit(self, pipeline: str, txid: int, records: int, keys_updated: int) -> None:
        """A committed txid: its count, the last committed txid, the records read and keys written."""
        self.batches.labels(pipeline, "committed").inc()
        self.committed_txid.labels(pipeline).set(txid)
        self.records.labels(pipeline).inc(records)
        self.keys_updated.labels(pipeline).inc(keys_updated)

    def record_audit(self, pipeline: str, txid: int, differences: int, at: float) -> None:
        """The result of an audit of ``pipeline`` as of ``txid``, finished at Unix time ``at``."""
        self.audit_result.labels(pipeline).set(0 if differences else 1)
        self.audit_differences.labels(pipeline).set(differences)
        self.audit_timestamp.labels(pipeline).set(at)
        self.audit_txid.labels(pipeline).set(txid)

    def precreate(self, pipeline: str, topic: str, partition: str, policy: str) -> None:
        """As :meth:`spouts.metrics.SpoutMetrics.precreate` (spouts are handed the service's metrics too)."""
        self.spouts.precreate(pipeline, topic, partition, policy)

    def set_pipeline_state(self, pipeline: str, state: str) -> None:
        """One series per state: 1 for ``state``, 0 for the others (all present from the first call)."""
        for s in PIPELINE_STATES:
            self.pipeline_state.labels(pipeline, s).set(1 if s == state else 0)

    def precreate_failures(self, pipeline: str) -> None:
        """Every reason's failure series at 0, so the first failure is an increase Prometheus sees."""
        for reason in CAUSES:
            self.pipeline_failures.labels(pipeline, reason)

    def value(self, name: str, **labels: str) -> float:
        """The current value of a sample (0 when absent): for tests and the CLI's summary."""
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


METRICS = Metrics()
