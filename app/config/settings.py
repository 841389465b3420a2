"""The service's typed settings: frozen dataclasses a config document validates into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.topics import TopicSettings
from app.coordinator import CoordinatorConfig
from app.lease import unique_owner
from app.topology import Topology
from spouts.kafka.config import FirstPoll, redact
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory
from states.spec import StateKind


@dataclass(frozen=True, slots=True, repr=False)
class SparkSettings:
    """Where Spark runs: ``master`` (``local[*]``, ``k8s://...``) and extra ``conf`` entries."""

    master: str = "local[*]"
    app_name: str = "trident"
    conf: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"SparkSettings(master={self.master!r}, app_name={self.app_name!r}, conf={redact(dict(self.conf))!r})"


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The /metrics, /healthz and /readyz server; ``port`` 0 picks a free port."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = 9400


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    """Process-wide behaviour: the lease owner, readiness, shutdown and logging."""

    owner: str = field(default_factory=unique_owner)  # unique per process (app.lease); set only to a unique name
    ready_window_s: float = 120.0  # /readyz fails when no commit or idle poll happened for this long
    shutdown_grace_s: float = 30.0  # after SIGTERM, how long the current txid may take before it is abandoned
    log_level: str = "INFO"


@dataclass(frozen=True, slots=True)
class SpoutSettings:
    kind: SpoutKind = SpoutKind.OPAQUE
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    first_poll: FirstPoll = FirstPoll.UNCOMMITTED_EARLIEST
    first_poll_timestamp_ms: int | None = None
    caps: Caps = field(default_factory=Caps)
    data_loss: DataLossPolicy = DataLossPolicy.FAIL
    discovery_interval_s: float = 30.0
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class AggregateSettings:
    """``{sum: {field: amount, as: total}}``: aggregator name, input field (None for count), output column."""

    function: str
    output: str
    input: str | None = None


@dataclass(frozen=True, slots=True)
class StateSettings:
    kind: StateKind = StateKind.OPAQUE
    backend: str = "sqlite"
    table: str | None = None  # None: the topology id (with '-' as '_') + the group-by fields
    sqlite_path: str = "data/trident.db"
    cache_size: int = 10_000


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    id: str
    spout: SpoutSettings
    transforms: tuple[tuple[str, tuple[str, ...]], ...]  # ("map" | "each" | "filter", expressions)
    group_by: tuple[str, ...]
    aggregates: tuple[AggregateSettings, ...]
    state: StateSettings
    max_pending: int = 2
    accept_at_least_once: bool = False
    lease_ttl_s: float = 30.0
    retention: int = 16
    idle_sleep_s: float = 0.5


@dataclass(frozen=True, slots=True, repr=False)
class KafkaSettings:
    """The Kafka connection; ``properties`` pass through to librdkafka (secrets redacted in the repr)."""

    bootstrap_servers: str
    properties: tuple[tuple[str, str], ...] = ()
    isolation_level: str = "read_committed"
    request_timeout_s: float = 10.0
    read_timeout_s: float = 30.0

    def __repr__(self) -> str:
        return (f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, "
                f"properties={redact(dict(self.properties))!r}, isolation_level={self.isolation_level!r})")


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    kafka: KafkaSettings
    pipelines: tuple[PipelineSettings, ...]
    cassandra: CassandraSettings | None = None
    spark: SparkSettings = SparkSettings()
    http: HttpSettings = HttpSettings()
    service: ServiceSettings = field(default_factory=ServiceSettings)
    topics: tuple[TopicSettings, ...] = ()

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

