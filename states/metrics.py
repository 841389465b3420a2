"""The metrics the state layer records, on a Prometheus registry the caller chooses, per pipeline.

States, backing maps and stores take a :class:`StateMetrics` (default :data:`STATE_METRICS`, on
the global registry, pipeline ``""``). A pipeline's states get a view bound to its id
(:meth:`StateMetrics.bound`, done by :class:`states.factory.StateFactory`), so every sample carries
the ``pipeline`` label without the call sites naming it. The service's metrics (``app.metrics``)
include these same families, so the names and labels below are what dashboards query.
"""

from __future__ import annotations

import copy

from prometheus_client import REGISTRY, CollectorRegistry, Counter

#: How a serial read resolved an unknown compare-and-set outcome; ``unresolved``: the serial read kept failing too
#: (the batch fails and its txid is replayed from the frozen plan, which settles the key).
RESOLUTIONS = ("applied", "not_applied", "unresolved")


class StateMetricFamilies:
    """The counter families themselves (one set per registry), every one labelled by ``pipeline``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.cas_conflicts = Counter("trident_cas_conflicts_total",
                                     "Compare-and-set writes refused because the stored value changed.",
                                     ["pipeline"], registry=registry)
        self.cas_unknown = Counter("trident_cas_unknown_outcomes_total",
                                   "Compare-and-set writes of unknown outcome, by how the serial read resolved them (unresolved: the read failed too; the txid is replayed).",
                                   ["pipeline", "resolution"], registry=registry)
        self.state_requests = Counter("trident_state_requests_total", "Requests sent to the state store.",
                                      ["pipeline", "backend", "kind"], registry=registry)


class BoundCounter:
    """A counter family with its ``pipeline`` label set: ``inc()``, or ``labels(**the other labels)``."""

    __slots__ = ("family", "pipeline")

    def __init__(self, family: Counter, pipeline: str) -> None:
        self.family, self.pipeline = family, pipeline

    def labels(self, **labels: str) -> Counter:
        return self.family.labels(pipeline=self.pipeline, **labels)

    def inc(self, amount: float = 1) -> None:
        self.family.labels(pipeline=self.pipeline).inc(amount)


class StateMetrics:
    """Compare-and-set conflicts, unknown outcomes and requests sent to the state backends, for one pipeline."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, pipeline: str = "") -> None:
        self.registry = registry
        self.families = StateMetricFamilies(registry)
        self._bind(pipeline)

    def _bind(self, pipeline: str) -> None:
        f = self.families
        self.pipeline = pipeline
        self.cas_conflicts = BoundCounter(f.cas_conflicts, pipeline)
        self.cas_unknown = BoundCounter(f.cas_unknown, pipeline)
        self.state_requests = BoundCounter(f.state_requests, pipeline)

    def bound(self, pipeline: str) -> StateMetrics:
        """The same families, recording for ``pipeline``; its alerting series exist at 0 from now on."""
        view = copy.copy(self)
        view._bind(pipeline)  # a copy of this very object
        view.cas_conflicts.labels()
        for r in RESOLUTIONS:
            view.cas_unknown.labels(resolution=r)
        return view

    def value(self, name: str, **labels: str) -> float:
        """The current value of a sample (0 when absent), for tests; ``pipeline`` defaults to this view's."""
        v = self.registry.get_sample_value(name, {"pipeline": self.pipeline, **labels})
        return 0.0 if v is None else v


#: The default state metrics, on the global registry.
STATE_METRICS = StateMetrics()
