"""The service's YAML configuration: parsed, validated, typed, and compiled to the Python API's objects.

This package is the one place that reads the environment (STYLE.md, habit 9). A config file names the
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

:func:`load` returns a :class:`ServiceConfig` (the validated, frozen models); :func:`compile_pipeline` turns
one pipeline into the same objects the Python API builds: a :class:`~app.topology.topology.Topology`, a
:class:`~app.coordinator.coordinator.CoordinatorConfig` and a :class:`~states.factory.StateFactory`. A bad
field raises :class:`ConfigError` naming its path (``pipelines[0].state.table: ...``); unknown
keys are errors. ``${NAME}`` (or ``${NAME:-default}``) in a string value is replaced from the
environment, and the variables in :data:`SECRET_ENV` override secrets. Secrets are held as
:class:`~states.cassandra.settings.Secret` or redacted Kafka properties: they never show in a
repr, a log line or the printed plan. Every field and its default: ``docs/configuration.md``.

Modules: :mod:`.schema` (pydantic models of the document: types, bounds, the one place for
defaults, and the JSON Schema), :mod:`.errors` (ConfigError; pydantic's errors at their paths),
:mod:`.sql` (Spark SQL parsed and resolved without Spark), :mod:`.parse` (YAML, interpolation,
secret overrides, librdkafka's check, SQL resolution), :mod:`.runtime` (a lower layer's dataclass filled
from the model fields of the same name), :mod:`.compile` (the models to Topology, CoordinatorConfig and
StateFactory), :mod:`.topics` (the
declared Kafka topics and the retention check ``validate`` warns with).

May import :mod:`app.coordinator` and what lies below it (``app/__init__.py`` lists the layers); never
:mod:`app.audit`, :mod:`app.service` or :mod:`app.commands`.
"""

from app.config.compile import (
    AGGREGATORS,
    CompiledPipeline,
    compile_pipeline,
    coordinator_config,
    describe,
    spout_config,
    state_factory,
)
from app.config.errors import ConfigError
from app.config.parse import SECRET_ENV, load, loads, operator_name, parse
from app.config.schema.document import ServiceConfig, json_schema
from app.config.schema.pipeline import PipelineModel
from app.config.topics import TopicSettings, retention_warnings

__all__ = [
    "AGGREGATORS",
    "SECRET_ENV",
    "CompiledPipeline",
    "ConfigError",
    "PipelineModel",
    "ServiceConfig",
    "TopicSettings",
    "compile_pipeline",
    "coordinator_config",
    "describe",
    "json_schema",
    "load",
    "loads",
    "operator_name",
    "parse",
    "retention_warnings",
    "spout_config",
    "state_factory",
]
