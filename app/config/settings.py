"""The service's typed settings: frozen dataclasses a config document validates into.

No defaults here: every field is filled from the models of :mod:`app.config.schema`, the one
place where a config's defaults are written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.topics import TopicSettings
from app.coordinator import CoordinatorConfig
from app.error_policy import ErrorPolicy
from app.topology import Topology
from spouts.kafka.config import FirstPoll, redact
from spouts.kafka.formats import RecordFormat, RegistrySettings
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory
from states.spec import StateKind


@dataclass(frozen=True, slots=True, repr=False)
class SparkSettings:
    """Where Spark runs: ``master`` (``local[*]``, ``k8s://...``) and extra ``conf`` entries."""

    master: str
    app_name: str
    conf: tuple[tuple[str, str], ...]
    executors_gone_s: float = 60.0  # a cluster master without executors this long: /readyz degraded

    def __repr__(self) -> str:
        return f"SparkSettings(master={self.master!r}, app_name={self.app_name!r}, conf={redact(dict(self.conf))!r})"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The /metrics, /healthz and /readyz server; ``port`` 0 picks a free port."""

    enabled: bool
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """Process-wide behaviour: the lease owner, readiness, shutdown and logging."""

    owner: str  # unique per process (app.lease.unique_owner) unless set in the config
    ready_window_s: float  # /readyz fails when no commit or idle poll happened for this long
    shutdown_grace_s: float  # after SIGTERM, how long the current txid may take before it is abandoned
    log_level: str
    on_pipeline_failure: str = "isolate"  # "isolate" (the others go on) or "exit" (stop the process)
    standby_ready: bool = False  # /readyz counts a standby pipeline as ready (rolling updates of standbys)


@dataclass(frozen=True, slots=True)
class SpoutSettings:
    kind: SpoutKind
    topics: tuple[str, ...]
    topic_pattern: str | None
    first_poll: FirstPoll
    first_poll_timestamp_ms: int | None
    caps: Caps
    data_loss: DataLossPolicy
    discovery_interval_s: float
    group_id: str | None
    key_format: RecordFormat
    value_format: RecordFormat


@dataclass(frozen=True, slots=True)
class AggregateSettings:
    """``{sum: {field: amount, as: total}}``: aggregator name, input field (None for count), output column."""

    function: str
    output: str
    input: str | None


@dataclass(frozen=True, slots=True)
class StateSettings:
    kind: StateKind
    backend: str
    table: str | None  # None: the topology id (with '-' as '_') + the group-by fields
    sqlite_path: str
    cache_size: int
    tombstones: str | None  # "delete" | "ignore" | None (a null value is aggregated like any record)
    ttl_s: int | None


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    id: str
    spout: SpoutSettings
    transforms: tuple[tuple[str, tuple[str, ...]], ...]  # ("map" | "each" | "filter", expressions)
    group_by: tuple[str, ...]
    aggregates: tuple[AggregateSettings, ...]
    state: StateSettings
    max_pending: int
    accept_at_least_once: bool
    lease_ttl_s: float
    retention: int
    idle_sleep_s: float
    outage_limit_s: float | None
    errors: ErrorPolicy = field(default_factory=ErrorPolicy)


@dataclass(frozen=True, slots=True, repr=False)
class KafkaSettings:
    """The Kafka connection; ``properties`` pass through to librdkafka (secrets redacted in the repr)."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...]
    isolation_level: str
    request_timeout_s: float
    read_timeout_s: float
    schema_registry: RegistrySettings | None

    def __repr__(self) -> str:
        return (f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, "
                f"properties={redact(dict(self.properties))!r}, isolation_level={self.isolation_level!r})")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    kafka: KafkaSettings
    pipelines: tuple[PipelineSettings, ...]
    cassandra: CassandraSettings | None
    spark: SparkSettings
    http: HttpSettings
    service: ServiceSettings
    topics: tuple[TopicSettings, ...]

    def pipeline(self, pipeline_id: str) -> PipelineSettings:
        for p in self.pipelines:
            if p.id == pipeline_id:
                return p
        raise KeyError(pipeline_id)


@dataclass(frozen=True, slots=True)
class CompiledPipeline:
    """One pipeline as the Python API objects the service runs."""

    topology: Topology
    coordinator: CoordinatorConfig
    state: StateFactory

    @property
    def id(self) -> str:
        return self.topology.name

    def store(self) -> Any:
        """The transactional-state store (and lease) of this topology, on the state's backend."""
        return self.state.txstate_store(self.topology.name)

    def claim_tables(self) -> None:
        """Record this topology as the owner of every table it writes, before its first batch.

        Raises :class:`~states.ownership.TableOwnedError` (permanent) when another pipeline owns one.
        """
        from states.ownership import claim_table

        for _, sink in self.topology.sinks:
            claim_table(sink.factory, sink.name, self.topology.name)

