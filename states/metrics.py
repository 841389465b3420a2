"""The metrics the state layer records, on a Prometheus registry the caller chooses.

States, backing maps and stores take a :class:`StateMetrics` (default :data:`STATE_METRICS`, on
the global registry). The service's metrics (``app.metrics``) include these same objects, so the
names and labels below are what dashboards query.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter


class StateMetrics:
    """Compare-and-set conflicts, unknown outcomes and requests sent to the state backends."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self.cas_conflicts = Counter("trident_cas_conflicts_total",
                                     "Compare-and-set writes refused because the stored value changed.",
                                     registry=registry)
        self.cas_unknown = Counter("trident_cas_unknown_outcomes_total",
                                   "Timed-out compare-and-set writes, by how the serial read resolved them.",
                                   ["resolution"], registry=registry)
        self.state_requests = Counter("trident_state_requests_total", "Requests sent to the state store.",
                                      ["backend", "kind"], registry=registry)

    def value(self, name: str, **labels: str) -> float:
        """The current value of a sample (0 when absent), for tests."""
        v = self.registry.get_sample_value(name, labels or None)
        return 0.0 if v is None else v


#: The default state metrics, on the global registry.
STATE_METRICS = StateMetrics()
