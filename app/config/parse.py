"""Reading a config: YAML, ``${ENV}`` interpolation, secret overrides, the models of :mod:`.schema`, then
what needs Spark SQL or librdkafka to tell. The validated models are the service's configuration."""

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
from app.config.compile import coordinator_config, spout_config, state_factory
from app.config.errors import ConfigError, config_error
from app.config.schema.document import Document, ServiceConfig
from app.config.schema.kafka import KafkaModel
from app.config.schema.pipeline import PipelineModel
from spouts.kafka.config import KafkaSpoutConfig

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
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FILE_PROPERTIES = frozenset({"sasl.kerberos.keytab", "plugin.library.paths", "ssl.engine.location"})
_QUIET = logging.getLogger("app.config.librdkafka")  # librdkafka's own log lines while checking: not shown
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def operator_name(env: Mapping[str, str] | None = None) -> str:
    """The login name of whoever runs a command (``USER``), for audit records; empty when unset."""
    return (os.environ if env is None else env).get("USER", "")


def load(path: str | Path, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """Read, interpolate and validate a YAML config file (``env`` defaults to ``os.environ``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        msg = f"cannot read config file {path}: {e.strerror}"
        raise ConfigError(path="", message=msg) from e
    return loads(text, env)


def loads(text: str, env: Mapping[str, str] | None = None) -> ServiceConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        msg = f"not valid YAML: {e}"
        raise ConfigError(path="", message=msg) from e
    return parse(doc, env)


def parse(doc: Any, env: Mapping[str, str] | None = None) -> ServiceConfig:
    """Validate a parsed document (mappings, lists, scalars) into a :class:`ServiceConfig`."""
    env = os.environ if env is None else env
    doc = _with_secrets(_interpolate(doc, "", env), env)
    missing = missing_secrets(doc)
    if len(missing) > 1:  # one at a time would take a run per secret: every one is named at once
        msg = "secrets not set: " + "; ".join(f"{path} (set {name})" for path, name in missing)
        raise ConfigError(path="", message=msg)
    try:
        m = Document.model_validate(doc)
    except ValidationError as e:
        raise config_error(e, Document) from None
    _check_kafka(m.kafka)
    # the lease owner is chosen once per process: every pipeline of it holds its lease under one name
    m = m.model_copy(update={"service": m.service.model_copy(update={"owner": m.service.owner_or_unique()})})
    for i, p in enumerate(m.pipelines):
        _check_pipeline(f"pipelines[{i}]", p, doc["pipelines"][i])
        _check_runtime(f"pipelines[{i}]", m, p)
    return m


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


def missing_secrets(doc: Any) -> list[tuple[str, str]]:
    """Every password a config needs but has not: ``(setting, environment variable)``, in config order.

    Each of them alone is also refused by the models below; this lists all of them in one message.
    """
    if not isinstance(doc, dict):
        return []
    out: list[tuple[str, str]] = []
    kafka: dict[str, Any] = doc["kafka"] if isinstance(doc.get("kafka"), dict) else {}
    props: dict[str, Any] = kafka["properties"] if isinstance(kafka.get("properties"), dict) else {}
    mechanism = str(props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI"))).upper()
    if str(props.get("security.protocol", "")).upper().startswith("SASL") and mechanism in _PASSWORD_MECHANISMS \
            and not props.get("sasl.password"):
        out.append(("kafka.properties.sasl.password", "TRIDENT_KAFKA_SASL_PASSWORD"))
    registry = kafka.get("schema_registry")
    if isinstance(registry, dict) and registry.get("username") and registry.get("password") is None:
        out.append(("kafka.schema_registry.password", "TRIDENT_SCHEMA_REGISTRY_PASSWORD"))
    cassandra = doc.get("cassandra")
    if isinstance(cassandra, dict) and cassandra.get("username") and cassandra.get("password") is None:
        out.append(("cassandra.password", "TRIDENT_CASSANDRA_PASSWORD"))
    return out


# -- what the models alone cannot tell ------------------------------------------------------------------

def _check_kafka(m: KafkaModel) -> None:
    props = dict(m.properties)
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI")).upper()
    if props.get("security.protocol", "").upper().startswith("SASL") and mechanism in _PASSWORD_MECHANISMS \
            and not props.get("sasl.password"):
        msg = f"required with SASL {mechanism}: set TRIDENT_KAFKA_SASL_PASSWORD"
        raise ConfigError(path="kafka.properties.sasl.password", message=msg)
    try:  # KafkaSpoutConfig refuses what the spout sets itself
        KafkaSpoutConfig(m.bootstrap_servers, topics=("t",), properties=props)
    except ValueError as e:
        raise ConfigError(path="kafka.properties", message=str(e)) from None
    _librdkafka_accepts("kafka.properties", props)


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


def _check_pipeline(path: str, m: PipelineModel, raw: dict[str, Any]) -> None:
    """Every transform parses and names columns that exist where it runs; so do the group-by and aggregate fields."""
    columns = _transforms(f"{path}.transforms", m, raw.get("transforms") or [])
    for i, field in enumerate(m.group_by):
        _resolve(f"{path}.group_by[{i}]", field, columns)
    for i, a in enumerate(m.aggregates):
        function, input_, _ = a.function()
        if input_ is not None:
            _resolve(f"{path}.aggregates[{i}].{function}.field", input_, columns)


def _check_runtime(path: str, m: Document, p: PipelineModel) -> None:
    """The runtime objects of the pipeline build: a check of theirs the models lack is a config error, not a
    traceback at start-up."""
    for build in (spout_config, coordinator_config, state_factory):
        try:
            build(m, p)
        except ValueError as e:
            raise ConfigError(path, str(e)) from None


def _transforms(path: str, m: PipelineModel, raw: list[Any]) -> sql.Columns:
    """Each step's expressions parsed and resolved against the columns it sees; the columns after the steps."""
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
    return columns


def _resolve(path: str, name: str, columns: sql.Columns) -> None:
    if columns.missing([name]):
        raise ConfigError(path, f"unknown column {name!r} (after the transforms the columns are {columns.shown()})")
