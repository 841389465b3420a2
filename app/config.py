"""The service's YAML configuration: parsed, validated, typed, and compiled to the Python API's objects.

This is the one module that reads the environment (STYLE.md, habit 9). A config file names the
Kafka and Cassandra connections, Spark, the HTTP port, and one or more pipelines::

    kafka: {bootstrap_servers: "broker:9092", properties: {security.protocol: SASL_SSL}}
    pipelines:
      - id: word-count
        spout: {topics: [sentences]}
        transforms:
          - map: ["explode(split(CAST(value AS STRING), ' ')) AS word"]
          - filter: "word <> ''"
        group_by: [word]
        aggregates: [{count: {as: count}}]
        state: {backend: sqlite, table: word_counts, sqlite_path: data/state.db}

:func:`load` returns a :class:`ServiceConfig` (frozen dataclasses); :func:`compile_pipeline` turns
one pipeline into the same objects the Python API builds: a :class:`~app.topology.Topology`, a
:class:`~app.coordinator.CoordinatorConfig` and a :class:`~states.factory.StateFactory`. A bad
field raises :class:`ConfigError` naming its path (``pipelines[0].state.table: ...``); unknown
keys are errors. ``${NAME}`` (or ``${NAME:-default}``) in a string value is replaced from the
environment, and the variables in :data:`SECRET_ENV` override secrets. Secrets are held as
:class:`~states.cassandra.settings.Secret` or redacted Kafka properties: they never show in a
repr, a log line or the printed plan. Every field and its default: ``docs/configuration.md``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from app.coordinator import CoordinatorConfig
from app.guarantees import check_combination
from app.topology import Agg, Topology
from spouts.kafka.config import FirstPoll, KafkaSpoutConfig, redact
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.aggregators import Count, Max, Min, Sum
from states.cassandra.settings import CassandraSettings, Secret, TlsSettings
from states.factory import StateFactory
from states.spec import StateKind, check_identifier

#: Environment variables that override secrets (and the settings secrets travel with).
#: name -> (section, key): ``kafka`` keys are librdkafka properties, ``cassandra`` keys are settings.
SECRET_ENV: Mapping[str, tuple[str, str]] = {
    "TRIDENT_KAFKA_SASL_USERNAME": ("kafka", "sasl.username"),
    "TRIDENT_KAFKA_SASL_PASSWORD": ("kafka", "sasl.password"),
    "TRIDENT_KAFKA_SSL_KEY_PASSWORD": ("kafka", "ssl.key.password"),
    "TRIDENT_KAFKA_SSL_KEYSTORE_PASSWORD": ("kafka", "ssl.keystore.password"),
    "TRIDENT_CASSANDRA_USERNAME": ("cassandra", "username"),
    "TRIDENT_CASSANDRA_PASSWORD": ("cassandra", "password"),
}
AGGREGATORS = {"count": Count, "sum": Sum, "min": Min, "max": Max}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PIPELINE_ID = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
_MISSING: Any = object()
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ConfigError(ValueError):
    """A config value that is missing, mistyped or invalid; ``path`` names it (``pipelines[0].state``)."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}" if path else message)


# -- the typed settings ------------------------------------------------------------------------


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

    owner: str = field(default_factory=socket.gethostname)  # a restarted pod of the same name takes over at once
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


# -- loading -----------------------------------------------------------------------------------


def load(path: str | Path, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """Read, interpolate and validate a YAML config file (``env`` defaults to ``os.environ``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError("", f"cannot read config file {path}: {e.strerror}") from e
    return loads(text, env)


def loads(text: str, env: Mapping[str, str] | None = None) -> ServiceConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError("", f"not valid YAML: {e}") from e
    return parse(doc, env)


def parse(doc: Any, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """Validate a parsed document (mappings, lists, scalars) into a :class:`ServiceConfig`."""
    env = os.environ if env is None else env
    root = _Node(_interpolate(doc, "", env), "")
    root.keys("kafka", "cassandra", "spark", "http", "service", "pipelines")
    kafka = _kafka(root.child("kafka", required=True), env)
    cassandra = _cassandra(root.child("cassandra"), env)
    pipelines_node = root.child("pipelines", required=True)
    items = pipelines_node.items()
    if not items:
        raise ConfigError(pipelines_node.path, "name at least one pipeline")
    pipelines = tuple(_pipeline(n) for n in items)
    seen: dict[str, str] = {}
    for n, p in zip(items, pipelines):
        if p.id in seen:
            raise ConfigError(f"{n.path}.id", f"duplicate pipeline id {p.id!r} (also {seen[p.id]})")
        seen[p.id] = f"{n.path}.id"
        if p.state.backend == "cassandra" and cassandra is None:
            raise ConfigError(f"{n.path}.state.backend", "backend cassandra needs a top-level cassandra section")
    return ServiceConfig(kafka=kafka, pipelines=pipelines, cassandra=cassandra,
                         spark=_spark(root.child("spark")), http=_http(root.child("http")),
                         service=_service(root.child("service")))


def _interpolate(value: Any, path: str, env: Mapping[str, str]) -> Any:
    """Replace ``${NAME}`` / ``${NAME:-default}`` in every string; an unset name without default is an error."""
    if isinstance(value, str):
        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is None:
                raise ConfigError(path, f"environment variable {name} is not set (write ${{{name}:-default}} "
                                        "for a default)")
            return default
        return _ENV_REF.sub(sub, value)
    if isinstance(value, Mapping):
        return {k: _interpolate(v, _join(path, k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


# -- sections ----------------------------------------------------------------------------------


def _kafka(n: _Node, env: Mapping[str, str]) -> KafkaSettings:
    n.keys("bootstrap_servers", "properties", "isolation_level", "request_timeout_s", "read_timeout_s")
    props_node = n.child("properties")
    props: dict[str, str] = {}
    if props_node.present:
        for key, value in props_node.mapping().items():
            if not isinstance(value, (str, int, float, bool)):
                raise ConfigError(_join(props_node.path, key), "a librdkafka property must be a scalar")
            props[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    for name, (section, key) in SECRET_ENV.items():
        if section == "kafka" and env.get(name):
            props[key] = env[name]
    settings = KafkaSettings(
        bootstrap_servers=n.str("bootstrap_servers", required=True),
        properties=tuple(sorted(props.items())),
        isolation_level=n.choice("isolation_level", ("read_committed", "read_uncommitted"), "read_committed"),
        request_timeout_s=n.number("request_timeout_s", 10.0, minimum=0),
        read_timeout_s=n.number("read_timeout_s", 30.0, minimum=0),
    )
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
    if props.get("security.protocol", "").upper().startswith("SASL") and mechanism in _PASSWORD_MECHANISMS \
            and not props.get("sasl.password"):
        raise ConfigError(_join(props_node.path, "sasl.password"), f"required with SASL {mechanism}: set "
                                                                   "TRIDENT_KAFKA_SASL_PASSWORD")
    # Let KafkaSpoutConfig refuse what it refuses (reserved properties) at the kafka section's path.
    _checked(props_node.path or n.path, lambda: KafkaSpoutConfig(settings.bootstrap_servers, topics=("t",),
                                                                 properties=dict(settings.properties)))
    return settings


def _cassandra(n: _Node, env: Mapping[str, str]) -> CassandraSettings | None:
    if not n.present:
        return None
    known = tuple(f.name for f in fields(CassandraSettings))
    n.keys(*known)
    values = dict(n.mapping())
    values.update({key: env[name] for name, (section, key) in SECRET_ENV.items()
                   if section == "cassandra" and env.get(name)})
    if values.get("password") is not None:
        values["password"] = Secret(str(values["password"]))
    for key in ("port", "max_concurrency", "max_retries", "protocol_version"):
        if values.get(key) is not None:
            values[key] = n.int(key, None) if key in n.mapping() else values[key]
    if n.child("tls").present:
        n.child("tls").keys(*(f.name for f in fields(TlsSettings)))
    if values.get("username") and values.get("password") is None:
        raise ConfigError(f"{n.path}.password", "required with a username: set TRIDENT_CASSANDRA_PASSWORD "
                                                "(or cassandra.password, e.g. from ${A_VARIABLE})")
    return _checked(n.path, lambda: CassandraSettings.from_mapping(values))


def _spark(n: _Node) -> SparkSettings:
    n.keys("master", "app_name", "conf")
    conf_node = n.child("conf")
    conf = {}
    if conf_node.present:
        for k, v in conf_node.mapping().items():
            if not isinstance(v, (str, int, float, bool)):
                raise ConfigError(_join(conf_node.path, k), "a Spark conf value must be a scalar")
            conf[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return SparkSettings(master=n.str("master", default="local[*]"), app_name=n.str("app_name", default="trident"),
                         conf=tuple(sorted(conf.items())))


def _http(n: _Node) -> HttpSettings:
    n.keys("enabled", "host", "port")
    return HttpSettings(enabled=n.bool("enabled", True), host=n.str("host", default="0.0.0.0"),
                        port=n.int("port", 9400, minimum=0, maximum=65535))


def _service(n: _Node) -> ServiceSettings:
    n.keys("owner", "ready_window_s", "shutdown_grace_s", "log_level")
    owner = n.str("owner", default="") or socket.gethostname()
    return ServiceSettings(owner=owner, ready_window_s=n.number("ready_window_s", 120.0, minimum=0.001),
                           shutdown_grace_s=n.number("shutdown_grace_s", 30.0, minimum=0),
                           log_level=n.choice("log_level", ("DEBUG", "INFO", "WARNING", "ERROR"), "INFO"))


def _pipeline(n: _Node) -> PipelineSettings:
    n.keys("id", "spout", "transforms", "group_by", "aggregates", "state", "max_pending", "accept_at_least_once",
           "lease_ttl_s", "retention", "idle_sleep_s")
    pid = n.str("id", required=True)
    if not _PIPELINE_ID.match(pid):
        raise ConfigError(f"{n.path}.id", f"invalid pipeline id {pid!r} (use 1-48 lower-case letters, digits, "
                                          "'-' and '_', starting with a letter)")
    group_node = n.child("group_by")
    group_by = tuple(g.checked(check_identifier, "group-by field") for g in group_node.items()) \
        if group_node.present else ()
    agg_node = n.child("aggregates", required=True)
    aggregates = tuple(_aggregate(a) for a in agg_node.items())
    if not aggregates:
        raise ConfigError(agg_node.path, "name at least one aggregate")
    outputs = [a.output for a in aggregates]
    for a, out in zip(agg_node.items(), outputs):
        if outputs.count(out) > 1 or out in group_by:
            raise ConfigError(a.path, f"output column {out!r} is used twice (group-by fields and aggregate "
                                      "outputs need distinct names)")
    spout, state = _spout(n.child("spout", required=True)), _state(n.child("state"))
    accept = n.bool("accept_at_least_once", False)
    _checked(f"{n.path}.state.kind", lambda: check_combination(spout.kind, state.kind, accept_at_least_once=accept))
    return PipelineSettings(
        id=pid, spout=spout, transforms=_transforms(n.child("transforms")), group_by=group_by,
        aggregates=aggregates, state=state, max_pending=n.int("max_pending", 2, minimum=1),
        accept_at_least_once=accept, lease_ttl_s=n.number("lease_ttl_s", 30.0, minimum=0.001),
        retention=n.int("retention", 16, minimum=2), idle_sleep_s=n.number("idle_sleep_s", 0.5, minimum=0),
    )


def _spout(n: _Node) -> SpoutSettings:
    n.keys("kind", "topics", "topic_pattern", "first_poll", "first_poll_timestamp_ms", "caps", "data_loss",
           "discovery_interval_s", "group_id")
    topics_node = n.child("topics")
    topics = tuple(t.checked(_topic) for t in topics_node.items()) if topics_node.present else ()
    pattern = n.str("topic_pattern", default=None)
    if bool(topics) == (pattern is not None):
        raise ConfigError(n.path, "set exactly one of topics (a non-empty list) or topic_pattern (a regular expression)")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(f"{n.path}.topic_pattern", f"not a regular expression: {e}") from None
    first_poll = n.enum("first_poll", FirstPoll, FirstPoll.UNCOMMITTED_EARLIEST)
    ts = n.int("first_poll_timestamp_ms", None, minimum=0)
    if first_poll.position == "timestamp" and ts is None:
        raise ConfigError(f"{n.path}.first_poll_timestamp_ms", f"first_poll {first_poll.value} needs it")
    caps_node = n.child("caps")
    caps_node.keys("per_partition", "per_batch")
    caps = Caps(per_partition=caps_node.int("per_partition", Caps().per_partition, minimum=1),
                per_batch=caps_node.int("per_batch", Caps().per_batch, minimum=1))
    return SpoutSettings(kind=n.enum("kind", SpoutKind, SpoutKind.OPAQUE), topics=topics, topic_pattern=pattern,
                         first_poll=first_poll, first_poll_timestamp_ms=ts, caps=caps,
                         data_loss=n.enum("data_loss", DataLossPolicy, DataLossPolicy.FAIL),
                         discovery_interval_s=n.number("discovery_interval_s", 30.0, minimum=0),
                         group_id=n.str("group_id", default=None))


def _transforms(n: _Node) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out = []
    for item in n.items() if n.present else []:
        step = item.mapping()
        if len(step) != 1 or next(iter(step)) not in ("map", "each", "filter"):
            raise ConfigError(item.path, "a transform is one of {map: [expressions]}, {each: [expressions]} or "
                                         "{filter: predicate}")
        kind = next(iter(step))
        node = item.child(kind)
        if kind == "filter":
            exprs = (node.checked(_expression),)
        else:
            raw = node.value
            exprs = (node.checked(_expression),) if isinstance(raw, str) else \
                tuple(e.checked(_expression) for e in node.items())
            if not exprs:
                raise ConfigError(node.path, "name at least one Spark SQL expression")
        out.append((kind, exprs))
    return tuple(out)


def _aggregate(n: _Node) -> AggregateSettings:
    if isinstance(n.value, str):  # "- count": the aggregator without options
        n = _Node({n.value: None}, n.path)
    spec = n.mapping()
    if len(spec) != 1 or next(iter(spec)) not in AGGREGATORS:
        raise ConfigError(n.path, f"an aggregate is one of {sorted(AGGREGATORS)} with its options, "
                                  "e.g. {sum: {field: amount, as: total}}")
    function = next(iter(spec))
    body = n.child(function)
    if body.value is None:
        body = _Node({}, body.path)
    body.keys("as") if function == "count" else body.keys("field", "as")
    output = body.child("as").checked(check_identifier, "aggregate output column") if body.child("as").present \
        else function
    if function != "count":
        field_name = body.child("field", required=True).checked(check_identifier, "aggregate input field")
        return AggregateSettings(function, output, field_name)
    return AggregateSettings(function, check_identifier(output, "aggregate output column"))


def _state(n: _Node) -> StateSettings:
    n.keys("kind", "backend", "table", "sqlite_path", "cache_size")
    table = n.child("table")
    return StateSettings(kind=n.enum("kind", StateKind, StateKind.OPAQUE),
                         backend=n.choice("backend", ("sqlite", "cassandra"), "sqlite"),
                         table=table.checked(check_identifier, "table name") if table.present else None,
                         sqlite_path=n.str("sqlite_path", default="data/trident.db"),
                         cache_size=n.int("cache_size", 10_000, minimum=0))


def _topic(name: Any) -> str:
    if not isinstance(name, str) or not _TOPIC.match(name):
        raise ValueError(f"invalid topic name {name!r} (letters, digits, '.', '_', '-')")
    return name


def _expression(e: Any) -> str:
    if not isinstance(e, str) or not e.strip():
        raise ValueError(f"expected a Spark SQL expression (a non-empty string), got {e!r}")
    return e


# -- compiling to the Python API -----------------------------------------------------------------


def spout_config(config: ServiceConfig, p: PipelineSettings) -> KafkaSpoutConfig:
    s, k = p.spout, config.kafka
    return KafkaSpoutConfig(k.bootstrap_servers, topics=s.topics, topic_pattern=s.topic_pattern,
                            first_poll=s.first_poll, first_poll_timestamp_ms=s.first_poll_timestamp_ms,
                            data_loss=s.data_loss, isolation_level=k.isolation_level,
                            discovery_interval_s=s.discovery_interval_s, group_id=s.group_id,
                            request_timeout_s=k.request_timeout_s, read_timeout_s=k.read_timeout_s,
                            properties=dict(k.properties))


def state_factory(config: ServiceConfig, p: PipelineSettings) -> StateFactory:
    st = p.state
    return StateFactory(kind=st.kind, backend=st.backend,
                        sqlite_path=st.sqlite_path if st.backend == "sqlite" else None,
                        cassandra=config.cassandra if st.backend == "cassandra" else None,
                        cache_size=st.cache_size)


def coordinator_config(config: ServiceConfig, p: PipelineSettings) -> CoordinatorConfig:
    return CoordinatorConfig(caps=p.spout.caps, max_pending=p.max_pending, retention=p.retention,
                             lease_ttl_s=p.lease_ttl_s, owner=config.service.owner, idle_sleep_s=p.idle_sleep_s,
                             accept_at_least_once=p.accept_at_least_once)


def compile_pipeline(config: ServiceConfig, pipeline: PipelineSettings | str, *, metrics: Any = None) -> CompiledPipeline:
    """The topology, coordinator settings and state factory that ``pipeline`` describes.

    ``metrics`` (an :class:`app.metrics.Metrics`) lets the spout publish partition lag.
    """
    from spouts.kafka import KafkaSpout, TransactionalKafkaSpout

    p = config.pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    spout_cls = TransactionalKafkaSpout if p.spout.kind is SpoutKind.TRANSACTIONAL else KafkaSpout
    topology = Topology(p.id)
    stream = topology.new_stream(spout_cls(spout_config(config, p), p.id, metrics))
    for kind, exprs in p.transforms:
        stream = stream.filter(exprs[0]) if kind == "filter" else getattr(stream, kind)(*exprs)
    factory = state_factory(config, p)
    aggs = [Agg(AGGREGATORS[a.function](), a.output, a.input) for a in p.aggregates]
    if p.group_by:
        stream.group_by(*p.group_by).persistent_aggregate(factory, aggs, name=p.state.table)
    else:
        stream.persistent_aggregate(factory, aggs, name=p.state.table or p.id.replace("-", "_"))
    return CompiledPipeline(topology, coordinator_config(config, p), factory)


def describe(topology: Topology, coordinator: CoordinatorConfig) -> dict[str, Any]:
    """A plain, comparable, secret-free description of what a topology runs (``validate`` prints it).

    Two topologies with equal descriptions read the same records, run the same transforms and
    write the same tables the same way: the config ≡ Python API test compares these.
    """
    spout = topology.spout
    cfg = getattr(spout, "config", None)
    sinks = []
    for stream, sink in topology.sinks:
        f = sink.factory
        sinks.append({
            "transforms": [[t.kind, *t.exprs] if t.function is None else [t.kind, repr(t.function)]
                           for t in stream.transforms],
            "table": sink.name,
            "group_by": list(getattr(sink, "group_by", ())),
            "aggregates": [{"function": type(a.aggregator).__name__.lower(), "input": a.input, "output": a.output}
                           for a in getattr(sink, "aggregates", ())],
            "state": {"kind": f.kind.value, "backend": f.backend, "sqlite_path": f.sqlite_path,
                      "cassandra": None if f.cassandra is None else _cassandra_summary(f.cassandra),
                      "cache_size": f.cache_size},
        })
    c = coordinator
    return {
        "topology": topology.name,
        "spout": {
            "class": type(spout).__name__, "kind": spout.kind.value if spout is not None else None,
            "bootstrap_servers": cfg.bootstrap_servers if cfg else None,
            "topics": list(cfg.topics) if cfg else None, "topic_pattern": cfg.topic_pattern if cfg else None,
            "first_poll": cfg.first_poll.value if cfg else None,
            "first_poll_timestamp_ms": cfg.first_poll_timestamp_ms if cfg else None,
            "data_loss": cfg.data_loss.value if cfg else None,
            "isolation_level": cfg.isolation_level if cfg else None,
            "discovery_interval_s": cfg.discovery_interval_s if cfg else None,
            "group_id": cfg.group(topology.name) if cfg else None,
            "properties": redact(dict(cfg.properties)) if cfg else None,
        },
        "sinks": sinks,
        "coordinator": {"caps": {"per_partition": c.caps.per_partition, "per_batch": c.caps.per_batch},
                        "max_pending": c.max_pending, "retention": c.retention, "lease_ttl_s": c.lease_ttl_s,
                        "owner": c.owner, "idle_sleep_s": c.idle_sleep_s,
                        "accept_at_least_once": c.accept_at_least_once},
    }


def _cassandra_summary(s: CassandraSettings) -> dict[str, Any]:
    return {"contact_points": list(s.contact_points), "port": s.port, "keyspace": s.keyspace,
            "local_dc": s.local_dc, "consistency": s.consistency, "serial_consistency": s.serial_consistency,
            "username": s.username, "password": None if s.password is None else "***", "tls": s.tls.enabled}


# -- a validating view of one node of the document ----------------------------------------------


class _Node:
    """A value at ``path`` with typed getters that raise :class:`ConfigError` naming the path."""

    __slots__ = ("path", "present", "value")

    def __init__(self, value: Any, path: str, present: bool = True) -> None:
        self.value, self.path, self.present = value, path, present

    def mapping(self) -> Mapping[str, Any]:
        if not self.present or self.value is None:
            return {}
        if not isinstance(self.value, Mapping):
            raise ConfigError(self.path, f"expected a mapping, got {_kind(self.value)}")
        for k in self.value:
            if not isinstance(k, str):
                raise ConfigError(self.path, f"keys must be strings, got {k!r}")
        return self.value

    def keys(self, *known: str) -> None:
        unknown = [k for k in self.mapping() if k not in known]
        if unknown:
            raise ConfigError(_join(self.path, unknown[0]), f"unknown key (known here: {', '.join(known)})")

    def child(self, key: str, *, required: bool = False) -> _Node:
        m = self.mapping()
        if key not in m:
            if required:
                raise ConfigError(_join(self.path, key), "required")
            return _Node(None, _join(self.path, key), present=False)
        return _Node(m[key], _join(self.path, key))

    def items(self) -> list[_Node]:
        if not self.present or self.value is None:
            return []
        if not isinstance(self.value, list):
            raise ConfigError(self.path, f"expected a list, got {_kind(self.value)}")
        return [_Node(v, f"{self.path}[{i}]") for i, v in enumerate(self.value)]

    def checked(self, check: Callable[..., Any], *args: Any) -> Any:
        return _checked(self.path, lambda: check(self.value, *args))

    def str(self, key: str, *, default: Any = _MISSING, required: bool = False) -> Any:
        n = self.child(key, required=required)
        if not n.present or n.value is None:
            return None if default is _MISSING else default
        if not isinstance(n.value, str) or not n.value:
            raise ConfigError(n.path, f"expected a non-empty string, got {_kind(n.value)}")
        return n.value

    def bool(self, key: str, default: bool) -> bool:
        n = self.child(key)
        if not n.present:
            return default
        if not isinstance(n.value, bool):
            raise ConfigError(n.path, f"expected true or false, got {_kind(n.value)}")
        return n.value

    def int(self, key: str, default: int | None, *, minimum: int | None = None, maximum: int | None = None) -> Any:
        n = self.child(key)
        if not n.present or n.value is None:
            return default
        v = n.value
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):  # from ${ENV} interpolation
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(n.path, f"expected an integer, got {_kind(n.value)}")
        _bounds(n.path, v, minimum, maximum)
        return v

    def number(self, key: str, default: float, *, minimum: float | None = None) -> float:
        n = self.child(key)
        if not n.present or n.value is None:
            return default
        v = n.value
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(n.path, f"expected a number, got {_kind(n.value)}")
        _bounds(n.path, v, minimum, None)
        return float(v)

    def choice(self, key: str, options: tuple[str, ...], default: str) -> str:
        v = self.str(key, default=default)
        if v not in options:
            raise ConfigError(_join(self.path, key), f"{v!r} is not one of {', '.join(options)}")
        return v

    def enum(self, key: str, enum_cls: Any, default: Any) -> Any:
        options = tuple(e.value for e in enum_cls)
        v = self.str(key, default=None)
        if v is None:
            return default
        v = v.lower()
        if v not in options:
            raise ConfigError(_join(self.path, key), f"{v!r} is not one of {', '.join(options)}")
        return enum_cls(v)


def _checked(path: str, build: Callable[[], Any]) -> Any:
    """``build()``, with a ValueError or TypeError it raises re-raised as a ConfigError at ``path``."""
    try:
        return build()
    except ConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise ConfigError(path, str(e)) from None


def _bounds(path: str, v: float, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and v < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ConfigError(path, f"must be <= {maximum}, got {v}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, str):
        return f"a string ({v!r})" if v else "an empty string"
    if isinstance(v, (int, float)):
        return f"a number ({v})"
    return {dict: "a mapping", list: "a list"}.get(type(v), type(v).__name__)

