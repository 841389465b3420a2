"""The ``http:``, ``service:`` and ``audit:`` sections: the endpoints, the process's behaviour, audits."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    Field,
)

from app.config.schema.fields import Bool, Int, Number, Positive, Section, Text, choice
from app.coordinator.lease import unique_owner


class HttpModel(Section):
    enabled: Bool = Field(default=True, description="`false`: no HTTP server (no metrics, no probes)")
    host: Text = Field(default="0.0.0.0", description="the address to listen on")  # noqa: S104  probes and scrapes come from other pods
    port: Annotated[Int, Field(ge=0, le=65535)] = Field(default=9400, description=(
        "serves `/metrics` (Prometheus), `/healthz` (200 while the process lives and no pipeline holding its lease is hung: "
        "`service.live_window_s`) and `/readyz`; 0: any free port"))


class ServiceModel(Section):
    owner: Text | None = Field(default=None, description=(
        "the lease owner, shown in logs, `status` and the lease table (none: `<hostname>-<pid>-<random>`). Must be "
        "unique per process: an acquire whose outcome was unknown (a Cassandra timeout) is resolved by reading back "
        "the owner, so two processes of one name could both believe they hold the lease. Leave it unset unless you "
        "generate a unique name"))
    ready_window_s: Positive = Field(default=120.0, description=(
        "`/readyz` says `degraded` when a pipeline holding its lease finished no step for this long: see "
        "[`http`](#http)"))
    live_window_s: Positive = Field(default=600.0, description=(
        "`/healthz` answers 503 (a liveness probe restarts the process) when a pipeline holding its lease finished "
        "no step (a commit, an idle poll or a failed attempt) for this long: a hung coordinator. Keep it above the "
        "longest txid"))
    shutdown_grace_s: Annotated[Number, Field(ge=0)] = Field(default=30.0, description=(
        "after SIGTERM/SIGINT, how long the txid being committed may take to finish before it is abandoned"))
    on_pipeline_failure: choice("isolate", "exit") = Field(  # type: ignore[valid-type]
        default="isolate", description=(
            "what a permanent failure of one pipeline does to the others. `isolate`: that pipeline stays `failed` "
            "(its thread has ended, its lease is released) while the others go on; the process exits once every "
            "pipeline has stopped. `exit`: every pipeline stops and the process exits at once (one restart of the "
            "pod retries them all). Either way the exit code is the highest of the failed pipelines' (1, or 2 for "
            "configuration), also when a signal ends the process later; the orchestrator's restart is the recovery "
            "of a failed pipeline"))
    standby_ready: Bool = Field(default=False, description=(
        "`/readyz` counts a pipeline waiting as standby as ready (200): for standby replicas behind a rolling "
        "update, where a new pod must turn Ready before an old one stops (the Helm chart sets it with "
        "`replicaCount` > 1)"))
    log_level: choice("DEBUG", "INFO", "WARNING", "ERROR", upper=True) = Field(  # type: ignore[valid-type]
        default="INFO", description="the service's log level (any case)")

    def owner_or_unique(self) -> str:
        return self.owner or unique_owner()


class AuditModel(Section):
    """Audits the service runs on its own (``python -m app audit`` of every pipeline it holds the lease of)."""

    every_s: Positive | None = Field(default=None, description=(
        "audit each pipeline this often (none: never; `python -m app audit` still runs by hand). The service "
        "recounts from the first offsets to the last committed txid on its own Spark session, compares the tables "
        "and dead letters, sets `trident_audit_last_*` and logs one line per audit; commits go on meanwhile. "
        "Only pipelines whose lease this process holds are audited"))
    max_share: Annotated[Number, Field(gt=0, le=1)] = Field(default=0.2, description=(
        "the most of the service's time audits may take: after an audit that took longer than this share of "
        "`every_s`, the next one waits until it would (the audit's seconds / `max_share`), so a large pipeline "
        "is audited less often rather than slowing its commits"))
