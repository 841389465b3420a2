"""The difference between declared topics and the cluster: what to create, grow or set, and what is refused.

Pure: :func:`diff` takes what the cluster reported and returns a :class:`Plan`. It never plans a
deletion or fewer partitions; a change Kafka cannot make safely (fewer partitions, another
replication factor) is a :class:`Refusal` with the reason, and a topic whose configs the cluster
would not show is :class:`Unknown` (its other fields are still compared).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.config.topics import TopicSettings


@dataclass(frozen=True, slots=True)
class TopicState:
    """A topic as the cluster reports it; ``configs`` None when they could not be read (``config_error``)."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str] | None = None
    config_error: str | None = None


@dataclass(frozen=True, slots=True)
class Change:
    """One step of an apply: ``create`` a topic, ``add_partitions`` up to a total, or ``set_configs``."""

    kind: str
    topic: str
    partitions: int | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    before: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "create":
            rf = self.before.get("replication_factor")
            configs = ", ".join(f"{k}={v}" for k, v in sorted(self.configs.items()))
            return (f"+ create {self.topic}: {self.partitions} partitions, replication factor "
                    f"{rf if rf is not None else 'broker default'}" + (f", {configs}" if configs else ""))
        if self.kind == "add_partitions":
            return f"~ {self.topic}: partitions {self.before['partitions']} -> {self.partitions}"
        return "\n".join(f"~ {self.topic}: config {k}: {self.before.get(k, '(default)')} -> {v}"
                         for k, v in sorted(self.configs.items()))


@dataclass(frozen=True, slots=True)
class Refusal:
    topic: str
    field: str
    reason: str

    def describe(self) -> str:
        return f"! {self.topic}: refused: {self.field}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Unknown:
    topic: str
    reason: str

    def describe(self) -> str:
        return f"? {self.topic}: cannot read topic configs from this cluster: {self.reason}"


@dataclass(frozen=True, slots=True)
class Plan:
    changes: tuple[Change, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    unknowns: tuple[Unknown, ...] = ()
    up_to_date: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.changes and not self.refusals

    def lines(self) -> list[str]:
        return ([c.describe() for c in self.changes] + [r.describe() for r in self.refusals]
                + [u.describe() for u in self.unknowns] + [f"= {t}: up to date" for t in self.up_to_date])

    def summary(self) -> str:
        if self.empty and not self.unknowns:
            return "nothing to change"
        kinds = [c.kind for c in self.changes]
        parts = [f"{kinds.count(k)} {label}" for k, label in
                 (("create", "to create"), ("add_partitions", "to grow"), ("set_configs", "to reconfigure"))
                 if kinds.count(k)]
        if self.refusals:
            parts.append(f"{len(self.refusals)} refused")
        if self.unknowns:
            parts.append(f"{len(self.unknowns)} with configs unknown")
        return ", ".join(parts) if parts else "nothing to change"

    def to_json(self) -> dict[str, Any]:
        return {"changes": [{"kind": c.kind, "topic": c.topic, "partitions": c.partitions, "configs": dict(c.configs),
                             "before": dict(c.before)} for c in self.changes],
                "refused": [{"topic": r.topic, "field": r.field, "reason": r.reason} for r in self.refusals],
                "unknown": [{"topic": u.topic, "reason": u.reason} for u in self.unknowns],
                "up_to_date": list(self.up_to_date), "summary": self.summary()}


def diff(declared: Sequence[TopicSettings], actual: Mapping[str, TopicState]) -> Plan:
    """What turns ``actual`` into ``declared`` without deleting or shrinking anything."""
    changes: list[Change] = []
    refusals: list[Refusal] = []
    unknowns: list[Unknown] = []
    up_to_date: list[str] = []
    for t in declared:
        now = actual.get(t.name)
        if now is None:
            changes.append(Change("create", t.name, t.partitions, dict(t.configs),
                                  {"replication_factor": t.replication_factor}))
            continue
        before = len(changes) + len(refusals)
        if t.partitions < now.partitions:
            refusals.append(Refusal(t.name, "partitions", f"declared {t.partitions}, the topic has {now.partitions}: "
                                    "Kafka cannot remove partitions (recreate the topic by hand if you must)"))
        elif t.partitions > now.partitions:
            changes.append(Change("add_partitions", t.name, t.partitions, before={"partitions": now.partitions}))
        if t.replication_factor is not None and t.replication_factor != now.replication_factor:
            refusals.append(Refusal(t.name, "replication_factor",
                                    f"declared {t.replication_factor}, the topic has {now.replication_factor}: "
                                    "changing it is a partition reassignment (kafka-reassign-partitions), "
                                    "not done here"))
        if now.configs is None:
            if t.configs:
                unknowns.append(Unknown(t.name, now.config_error or "no answer"))
        else:
            wanted = {k: v for k, v in t.configs if now.configs.get(k) != v}
            if wanted:
                changes.append(Change("set_configs", t.name, configs=wanted,
                                      before={k: now.configs.get(k) for k in wanted}))
        if len(changes) + len(refusals) == before and not (now.configs is None and t.configs):
            up_to_date.append(t.name)
    return Plan(tuple(changes), tuple(refusals), tuple(unknowns), tuple(up_to_date))
