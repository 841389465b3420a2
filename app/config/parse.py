"""Reading a config: YAML, ``${ENV}`` interpolation, secret overrides, and validation of every section."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from app.config.node import ConfigError, Node, _checked, _join
from app.config.settings import (
    AggregateSettings,
    HttpSettings,
    KafkaSettings,
    PipelineSettings,
    ServiceConfig,
    ServiceSettings,
    SparkSettings,
    SpoutSettings,
    StateSettings,
)
from app.config.topics import parse_topics
from app.guarantees import check_combination
from app.lease import unique_owner
from spouts.kafka.config import FirstPoll, KafkaSpoutConfig
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.aggregators import CombinerAggregator, Count, Max, Min, Sum
from states.cassandra.settings import CassandraSettings, Secret, TlsSettings
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
AGGREGATORS: Mapping[str, type[CombinerAggregator]] = {"count": Count, "sum": Sum, "min": Min, "max": Max}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PIPELINE_ID = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
    root = Node(_interpolate(doc, "", env), "")
    root.keys("kafka", "cassandra", "spark", "http", "service", "pipelines", "topics")
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
                         service=_service(root.child("service")), topics=parse_topics(root.child("topics")))


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


def _kafka(n: Node, env: Mapping[str, str]) -> KafkaSettings:
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


def _cassandra(n: Node, env: Mapping[str, str]) -> CassandraSettings | None:
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


def _spark(n: Node) -> SparkSettings:
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


def _http(n: Node) -> HttpSettings:
    n.keys("enabled", "host", "port")
    return HttpSettings(enabled=n.bool("enabled", True), host=n.str("host", default="0.0.0.0"),
                        port=n.int("port", 9400, minimum=0, maximum=65535))


def _service(n: Node) -> ServiceSettings:
    n.keys("owner", "ready_window_s", "shutdown_grace_s", "log_level")
    owner = n.str("owner", default="") or unique_owner()
    return ServiceSettings(owner=owner, ready_window_s=n.number("ready_window_s", 120.0, minimum=0.001),
                           shutdown_grace_s=n.number("shutdown_grace_s", 30.0, minimum=0),
                           log_level=n.choice("log_level", ("DEBUG", "INFO", "WARNING", "ERROR"), "INFO"))


def _pipeline(n: Node) -> PipelineSettings:
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


def _spout(n: Node) -> SpoutSettings:
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


def _transforms(n: Node) -> tuple[tuple[str, tuple[str, ...]], ...]:
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


def _aggregate(n: Node) -> AggregateSettings:
    if isinstance(n.value, str):  # "- count": the aggregator without options
        n = Node({n.value: None}, n.path)
    spec = n.mapping()
    if len(spec) != 1 or next(iter(spec)) not in AGGREGATORS:
        raise ConfigError(n.path, f"an aggregate is one of {sorted(AGGREGATORS)} with its options, "
                                  "e.g. {sum: {field: amount, as: total}}")
    function = next(iter(spec))
    body = n.child(function)
    if body.value is None:
        body = Node({}, body.path)
    body.keys("as") if function == "count" else body.keys("field", "as")
    output = body.child("as").checked(check_identifier, "aggregate output column") if body.child("as").present \
        else function
    if function != "count":
        field_name = body.child("field", required=True).checked(check_identifier, "aggregate input field")
        return AggregateSettings(function, output, field_name)
    return AggregateSettings(function, check_identifier(output, "aggregate output column"))


def _state(n: Node) -> StateSettings:
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

