"""Every Prometheus metric of the service, defined in one place.

Components take a :class:`Metrics` (default :data:`METRICS`, on the default registry); tests make
their own on a fresh ``CollectorRegistry`` and read values back with :meth:`Metrics.value`.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

PHASES = ("plan", "process", "freeze", "commit")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """The service's metrics on one registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        r = registry
        self.batches = Counter("trident_batches_total", "Batches by outcome (committed, failed, abandoned).",
                               ["pipeline", "outcome"], registry=r)
        self.committed_txid = Gauge("trident_committed_txid", "Last committed txid.", ["pipeline"], registry=r)
        self.current_txid = Gauge("trident_current_txid", "Highest txid being processed.", ["pipeline"], registry=r)
        self.records = Counter("trident_records_total", "Records in committed batches.", ["pipeline"], registry=r)
        self.keys_updated = Counter("trident_keys_updated_total", "State keys written by committed batches.",
                                    ["pipeline"], registry=r)
        self.partition_lag = Gauge("trident_partition_lag", "End offset minus committed next offset.",
                                   ["pipeline", "topic", "partition"], registry=r)
        self.phase_seconds = Histogram("trident_phase_seconds", "Latency of batch phases.", ["pipeline", "phase"],
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.replays = Counter("trident_batch_replays_total", "Batch attempts after the first one.", ["pipeline"],
                               registry=r)
        self.cas_conflicts = Counter("trident_cas_conflicts_total",
                                     "Compare-and-set writes refused because the stored value changed.", registry=r)
        self.cas_unknown = Counter("trident_cas_unknown_outcomes_total",
                                   "Timed-out compare-and-set writes, by how the serial read resolved them.",
                                   ["resolution"], registry=r)
        self.state_requests = Counter("trident_state_requests_total", "Requests sent to the state store.",
                                      ["backend", "kind"], registry=r)
        self.data_loss_events = Counter("trident_data_loss_events_total",
                                        "Times a partition's stored offset was below the log start.",
                                        ["topic", "partition", "policy"], registry=r)
        self.data_loss_offsets = Counter("trident_data_loss_offsets_total",
                                         "Offsets skipped because they were gone (policy skip).",
                                         ["topic", "partition"], registry=r)
        self.lease_held = Gauge("trident_lease_held", "1 while this process holds the coordinator lease.",
                                ["pipeline"], registry=r)
        self.lease_epoch = Gauge("trident_lease_epoch", "Epoch of the coordinator lease held.", ["pipeline"],
                                 registry=r)

    def value(self, name: str, **labels: str) -> float:
        """The current value of a sample (0 when absent): for tests and the CLI's summary."""
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


METRICS = Metrics()
