"""The whole config document, its cross-section checks, and its JSON Schemas (editors, the Helm chart)."""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import (
    ConfigDict,
    Field,
    model_validator,
)

from app.config.runtime import build
from app.config.schema.cassandra import CassandraModel
from app.config.schema.fields import ENV_REF, Section, Topic, at, none_is_empty
from app.config.schema.kafka import KafkaModel, TopicModel
from app.config.schema.pipeline import PipelineModel
from app.config.schema.service import AuditModel, HttpModel, ServiceModel
from app.config.schema.spark import SparkModel
from app.config.topics import TopicSettings
from app.spark.masters import state_refusal
from states.cassandra.settings import CassandraSettings


class Document(Section):
    """A service config: connections, Spark, the HTTP server, the service, pipelines and topics."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="trident-stream config")

    kafka: KafkaModel
    cassandra: CassandraModel | None = Field(default=None, description="required when a state backend is cassandra")
    spark: SparkModel = SparkModel()
    http: HttpModel = HttpModel()
    service: ServiceModel = ServiceModel()
    audit: AuditModel = AuditModel()
    pipelines: Annotated[list[PipelineModel], Field(min_length=1)]
    topics: Annotated[dict[Topic, TopicModel], none_is_empty(dict)] = Field(default_factory=dict)

    def pipeline(self, pipeline_id: str) -> PipelineModel:
        """The pipeline of id ``pipeline_id`` (KeyError when there is none)."""
        for p in self.pipelines:
            if p.id == pipeline_id:
                return p
        raise KeyError(pipeline_id)

    def declared_topics(self) -> tuple[TopicSettings, ...]:
        """The ``topics:`` section, one entry per topic (what ``topics plan|apply`` compares)."""
        return tuple(build(TopicSettings, t, name=name) for name, t in self.topics.items())

    def cassandra_settings(self) -> CassandraSettings | None:
        """The Cassandra connection the states take (None without a ``cassandra`` section)."""
        return None if self.cassandra is None else self.cassandra.settings()

    @model_validator(mode="after")
    def _across_pipelines(self) -> Document:
        seen: dict[str, int] = {}
        writers: dict[tuple[str, str, str], int] = {}
        for i, p in enumerate(self.pipelines):
            if p.id in seen:
                field = f"pipelines[{i}].id"
                raise at(field, f"duplicate pipeline id {p.id!r} (also pipelines[{seen[p.id]}].id)")
            seen[p.id] = i
            for part in ("key", "value"):
                if getattr(p.spout, f"{part}_format").format().type.registry and self.kafka.schema_registry is None:
                    field = f"pipelines[{i}].spout.{part}_format"
                    raise at(field, "a registry format needs kafka.schema_registry "
                             "(its url)")
            if p.state.backend == "cassandra" and self.cassandra is None:
                field = f"pipelines[{i}].state.backend"
                raise at(field, "backend cassandra needs a top-level cassandra section")
            refusal = state_refusal(p.state.backend, self.spark.master)
            if refusal is not None:  # a state on one machine's disk would split between a cluster's executors
                field = f"pipelines[{i}].state.backend"
                raise at(field, refusal)
            where = os.path.abspath(p.state.sqlite_path) if p.state.backend == "sqlite" else "cassandra"  # noqa: PTH100  normalised like abspath, symlinks not resolved
            key = (p.state.backend, where, p.table())
            if key in writers:
                other = self.pipelines[writers[key]]
                field = f"pipelines[{i}].state.table"
                raise at(field, f"table {key[2]!r} is also written by pipeline {other.id!r} "
                         f"(pipelines[{writers[key]}]): a state table belongs to one "
                         "pipeline")
            writers[key] = i
        return self


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a config file, for editors and the Helm chart.

    Every number and boolean may also be written as a ``${VAR}`` reference (converted after
    interpolation), so those accept a string of that shape too.
    """
    schema = Document.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    allowed: dict[str, Any] = _env_refs_allowed(schema)
    return allowed


#: Bounds pydantic leaves under its own names when a validator wraps the constrained type.
_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _env_refs_allowed(node: Any) -> Any:
    if isinstance(node, list):
        return [_env_refs_allowed(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {_BOUNDS.get(k, k): _env_refs_allowed(v) for k, v in node.items()}
    if node.get("type") in ("integer", "number", "boolean"):
        typed = {k: node.pop(k) for k in list(node) if k not in ("title", "description", "default")}
        node["anyOf"] = [typed, {"type": "string", "pattern": f"^{ENV_REF}$"}]
    return node


def chart_schema() -> dict[str, Any]:
    """:func:`json_schema` with every ``$ref`` inlined: the ``config`` property of the Helm chart's
    ``values.schema.json`` (a reference there would resolve against the chart's own root)."""
    schema = json_schema()
    defs = schema.pop("$defs", {})
    schema.pop("$schema", None)

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = inline(defs[node["$ref"].rsplit("/", 1)[1]])
            return {**target, **{k: inline(v) for k, v in node.items() if k != "$ref"}}
        return {k: inline(v) for k, v in node.items()}

    out: dict[str, Any] = inline(schema)
    out["description"] = "The pipeline config (docs/configuration.md; python -m app validate --schema)"
    return out


#: The service's configuration: the validated document (:func:`app.config.parse` fixes the lease owner).
ServiceConfig = Document
