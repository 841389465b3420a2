"""Reading a config: YAML, ``${ENV}`` interpolation, secret overrides, the models of :mod:`.schema`, then
what needs Spark SQL or librdkafka to tell, into the typed settings of :mod:`.settings`."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.config import sql
from app.config.errors import ConfigError, config_error
from app.config.schema import CassandraModel, Document, KafkaModel, PipelineModel
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
from app.config.topics import TopicSettings
from app.error_policy import Action, ErrorPolicy
from spouts.kafka.config import FirstPoll, KafkaSpoutConfig
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.aggregators import CombinerAggregator, Count, First, Latest, Max, Min, Sum
from states.cassandra.settings import CassandraSettings, Secret, TlsSettings
from states.spec import StateKind

#: Environment variables that override secrets (and the settings secrets travel with).
#: name -> (section, key): ``kafka`` keys are librdkafka properties, ``cassandra`` keys are settings.
SECRET_ENV: Mapping[str, tuple[str, str]] = {
    "TRIDENT_KAFKA_SASL_USERNAME": ("kafka", "sasl.username"),
    "TRIDENT_KAFKA_SASL_PASSWORD": ("kafka", "sasl.password"),
    "TRIDENT_KAFKA_SSL_KEY_PASSWORD": ("kafka", "ssl.key.password"),
    "TRIDENT_KAFKA_SSL_KEYSTORE_PASSWORD": ("kafka", "ssl.keystore.password"),
    "TRIDENT_CASSANDRA_USERNAME": ("cassandra", "username"),
    "TRIDENT_CASSANDRA_PASSWORD": ("cassandra", "password"),
    "TRIDENT_SCHEMA_REGISTRY_USERNAME": ("schema_registry", "username"),
    "TRIDENT_SCHEMA_REGISTRY_PASSWORD": ("schema_registry", "password"),
    "TRIDENT_SCHEMA_REGISTRY_KEY_PASSWORD": ("schema_registry", "key_password"),
}
AGGREGATORS: Mapping[str, type[CombinerAggregator]] = {"count": Count, "sum": Sum, "min": Min, "max": Max,
                                                      "latest": Latest, "first": First}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILE_PROPERTIES = frozenset({"sasl.kerberos.keytab", "plugin.library.paths", "ssl.engine.location"})
_QUIET = logging.getLogger("app.config.librdkafka")  # librdkafka's own log lines while checking: not shown
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


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
    doc = _with_secrets(_interpolate(doc, "", env), env)
    try:
        m = Document.model_validate(doc)
    except ValidationError as e:
        raise config_error(e, Document) from None
    pipelines = tuple(_pipeline(f"pipelines[{i}]", p, doc["pipelines"][i]) for i, p in enumerate(m.pipelines))
    s = m.service
    return ServiceConfig(
        kafka=_kafka(m.kafka), pipelines=pipelines, cassandra=_cassandra(m.cassandra),
        spark=SparkSettings(master=m.spark.master, app_name=m.spark.app_name, conf=tuple(sorted(m.spark.conf.items())),
                            executors_gone_s=m.spark.executors_gone_s),
        http=HttpSettings(enabled=m.http.enabled, host=m.http.host, port=m.http.port),
        service=ServiceSettings(owner=s.owner_or_unique(), ready_window_s=s.ready_window_s,
                                shutdown_grace_s=s.shutdown_grace_s, log_level=s.log_level,
                                on_pipeline_failure=s.on_pipeline_failure, standby_ready=s.standby_ready),
        topics=tuple(TopicSettings(name, t.partitions, t.replication_factor, tuple(sorted(t.configs.items())))
                     for name, t in m.topics.items()))


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
        return {k: _interpolate(v, f"{path}.{k}" if path else str(k), env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{path}[{i}]", env) for i, v in enumerate(value)]
    return value


def _with_secrets(doc: Any, env: Mapping[str, str]) -> Any:
    """The ``TRIDENT_*`` secrets that are set (and non-empty) written over the document's values."""
    if not isinstance(doc, dict):
        return doc
    for name, (section, key) in SECRET_ENV.items():
        if not env.get(name):
            continue
        if section == "kafka" and isinstance(doc.get("kafka"), dict):
            props = doc["kafka"].get("properties")
            doc["kafka"]["properties"] = {**(props if isinstance(props, dict) else {}), key: env[name]}
        elif section == "cassandra" and isinstance(doc.get("cassandra"), dict):
            doc["cassandra"][key] = env[name]
        elif section == "schema_registry" and isinstance(doc.get("kafka"), dict) \
                and isinstance(doc["kafka"].get("schema_registry"), dict):
            doc["kafka"]["schema_registry"][key] = env[name]
    return doc


# -- what the models alone cannot tell ------------------------------------------------------------------

def _kafka(m: KafkaModel) -> KafkaSettings:
    props = dict(m.properties)
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
    if props.get("security.protocol", "").upper().startswith("SASL") and mechanism in _PASSWORD_MECHANISMS \
            and not props.get("sasl.password"):
        raise ConfigError("kafka.properties.sasl.password", f"required with SASL {mechanism}: set "
                                                            "TRIDENT_KAFKA_SASL_PASSWORD")
    try:  # KafkaSpoutConfig refuses what the spout sets itself
        KafkaSpoutConfig(m.bootstrap_servers, topics=("t",), properties=props)
    except ValueError as e:
        raise ConfigError("kafka.properties", str(e)) from None
    _librdkafka_accepts("kafka.properties", props)
    return KafkaSettings(bootstrap_servers=m.bootstrap_servers, properties=tuple(sorted(props.items())),
                         isolation_level=m.isolation_level, request_timeout_s=m.request_timeout_s,
                         read_timeout_s=m.read_timeout_s,
                         schema_registry=None if m.schema_registry is None else m.schema_registry.settings())


def _librdkafka_accepts(path: str, props: Mapping[str, str]) -> None:
    """Let librdkafka check every property name and value: a consumer is built (no broker is named, so
    nothing connects) and closed. An unknown property would otherwise fail every batch at run time."""
    from confluent_kafka import Consumer, KafkaException

    # Files (certificates, keytabs, plugins) are opened when a client is built: whether they exist is
    # the machine's business (a pod mounts them), not the config's, so those values are left out here.
    checked = {k: v for k, v in props.items() if not (k.endswith(".location") or k in _FILE_PROPERTIES)}
    try:
        Consumer({**checked, "group.id": "trident-validate", "logger": _QUIET}).close()
    except KafkaException as e:
        message = e.args[0].str()
        named = re.search(r'property:? "([^"]+)"', message)
        key = named.group(1) if named and named.group(1) in props else None
        raise ConfigError(f"{path}.{key}" if key else path, f"librdkafka refuses it: {message}") from None


def _cassandra(m: CassandraModel | None) -> CassandraSettings | None:
    if m is None:
        return None
    t = m.tls
    return CassandraSettings(
        contact_points=tuple(m.contact_points), port=m.port, keyspace=m.keyspace, local_dc=m.local_dc,
        consistency=m.consistency, serial_consistency=m.serial_consistency, username=m.username,
        password=None if m.password is None else Secret(m.password.get_secret_value()),
        tls=TlsSettings(enabled=t.enabled, ca_file=t.ca_file, cert_file=t.cert_file, key_file=t.key_file,
                        check_hostname=t.check_hostname),
        max_concurrency=m.max_concurrency, max_retries=m.max_retries, backoff_initial_s=m.backoff_initial_s,
        backoff_max_s=m.backoff_max_s, request_timeout_s=m.request_timeout_s, connect_timeout_s=m.connect_timeout_s,
        reconnect_base_s=m.reconnect_base_s, reconnect_max_s=m.reconnect_max_s, protocol_version=m.protocol_version,
        create_keyspace=m.create_keyspace, replication=tuple(sorted(m.replication.items())))


def _pipeline(path: str, m: PipelineModel, raw: dict[str, Any]) -> PipelineSettings:
    transforms, columns = _transforms(f"{path}.transforms", m, raw.get("transforms") or [])
    for i, field in enumerate(m.group_by):
        _resolve(f"{path}.group_by[{i}]", field, columns)
    aggregates = []
    for i, a in enumerate(m.aggregates):
        function, input_, output = a.function()
        if input_ is not None:
            _resolve(f"{path}.aggregates[{i}].{function}.field", input_, columns)
        aggregates.append(AggregateSettings(function, output, input_))
    s, st = m.spout, m.state
    spout = SpoutSettings(kind=SpoutKind(s.kind), topics=tuple(s.topics), topic_pattern=s.topic_pattern,
                          first_poll=FirstPoll(s.first_poll), first_poll_timestamp_ms=s.first_poll_timestamp_ms,
                          caps=Caps(s.caps.per_partition, s.caps.per_batch), data_loss=DataLossPolicy(s.data_loss),
                          discovery_interval_s=s.discovery_interval_s, group_id=s.group_id,
                          key_format=s.key_format.format(), value_format=s.value_format.format())
    state = StateSettings(kind=StateKind(st.kind), backend=st.backend, table=st.table, sqlite_path=st.sqlite_path,
                          cache_size=st.cache_size, tombstones=st.tombstones, ttl_s=st.ttl_s)
    return PipelineSettings(id=m.id, spout=spout, transforms=transforms, group_by=tuple(m.group_by),
                            aggregates=tuple(aggregates), state=state, max_pending=m.max_pending,
                            accept_at_least_once=m.accept_at_least_once, lease_ttl_s=m.lease_ttl_s,
                            retention=m.retention, idle_sleep_s=m.idle_sleep_s,
                            outage_limit_s=m.outage_limit_s, errors=_errors(m.errors))


def _transforms(path: str, m: PipelineModel, raw: list[Any]) -> tuple[tuple[tuple[str, tuple[str, ...]], ...],
                                                                         sql.Columns]:
    """The steps, each expression parsed and resolved against the columns it sees, and the columns after them."""
    out = []
    columns = sql.Columns()
    for i, t in enumerate(m.transforms):
        kind, exprs = t.step()
        single = kind == "filter" or isinstance(raw[i].get(kind), str)
        trees = []
        for j, e in enumerate(exprs):
            at = f"{path}[{i}].{kind}" + ("" if single else f"[{j}]")
            try:
                tree = sql.parse(e)
            except ValueError as err:
                raise ConfigError(at, str(err)) from None
            unknown = columns.missing(sql.references(tree))
            if unknown:
                raise ConfigError(at, f"unknown column {unknown[0]!r} in {e!r} (the columns here are "
                                      f"{columns.shown()})")
            trees.append(tree)
        columns = sql.step(kind, trees, columns)
        out.append((kind, exprs))
    return tuple(out), columns


def _resolve(path: str, name: str, columns: sql.Columns) -> None:
    if columns.missing([name]):
        raise ConfigError(path, f"unknown column {name!r} (after the transforms the columns are {columns.shown()})")


def _errors(m: object) -> ErrorPolicy:
    """The pipeline's ``errors:`` as an :class:`~app.error_policy.ErrorPolicy`."""
    dead_letter = getattr(m, "dead_letter", None)
    if dead_letter is not None:
        return ErrorPolicy.dead_letter(dead_letter.topic)
    return ErrorPolicy(Action(str(m)))
