"""The metrics the spouts record, on a Prometheus registry the caller chooses.

Spouts take a :class:`SpoutMetrics` (default :data:`SPOUT_METRICS`, on the global registry) and
label every sample with their topology id, which is the pipeline's id. The
service's metrics (``app.metrics``) include these same objects, so the names and labels below are
what dashboards query.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge


class SpoutMetrics:
    """Partition lag seen while planning, and data lost to retention."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.partition_lag = Gauge("trident_partition_lag", "End offset minus committed next offset.",
                                   ["pipeline", "topic", "partition"], registry=registry)
        self.data_loss_events = Counter("trident_data_loss_events_total",
                                        "Times a partition's stored offset was below the log start.",
                                        ["pipeline", "topic", "partition", "policy"], registry=registry)
        self.data_loss_offsets = Counter("trident_data_loss_offsets_total",
                                         "Offsets skipped because they were gone (policy skip).",
                                         ["pipeline", "topic", "partition"], registry=registry)

    def precreate(self, pipeline: str, topic: str, partition: str, policy: str) -> None:
        """The data-loss series of a partition at 0, so ``increase()`` sees its first event."""
        self.data_loss_events.labels(pipeline, topic, partition, policy)
        self.data_loss_offsets.labels(pipeline, topic, partition)

    def value(self, name: str, **labels: str) -> float:
        """The current value of a sample (0 when absent), for tests."""
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


#: The default spout metrics, on the global registry.
SPOUT_METRICS = SpoutMetrics()
