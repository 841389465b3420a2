"""Each option is declared once, in its model: the runtime dataclasses take it by name and keep its default."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from app.config import parse
from app.config.compile import coordinator_config, spout_config, state_factory
from app.config.runtime import _hints, convert
from app.config.schema.cassandra import CassandraModel, TlsModel
from app.config.schema.kafka import KafkaModel, RegistryModel, TopicModel
from app.config.schema.pipeline import CapsModel, FormatModel, PipelineModel, SpoutModel, StateModel
from app.config.topics import TopicSettings
from app.coordinator.coordinator import CoordinatorConfig
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.formats import RecordFormat, RegistrySettings
from spouts.planner import Caps
from states.cassandra.settings import CassandraSettings, TlsSettings
from states.factory import StateFactory

#: Each runtime dataclass and the models it is filled from (compile.py and the models' own builders).
RUNTIME: list[tuple[type[Any], tuple[type[BaseModel], ...]]] = [
    (KafkaSpoutConfig, (SpoutModel, KafkaModel)),
    (CoordinatorConfig, (PipelineModel, SpoutModel)),
    (StateFactory, (StateModel,)),
    (Caps, (CapsModel,)),
    (CassandraSettings, (CassandraModel,)),
    (TlsSettings, (TlsModel,)),
    (RegistrySettings, (RegistryModel,)),
    (RecordFormat, (FormatModel,)),
    (TopicSettings, (TopicModel,)),
]

#: Model fields no runtime dataclass takes by name, and what reads them instead.
READ_ELSEWHERE = {
    (SpoutModel, "kind"): "picks the spout class (compile_pipeline)",
    (PipelineModel, "id"): "the topology's name",
    (PipelineModel, "spout"): "a section",
    (PipelineModel, "transforms"): "the topology's steps (compile_pipeline)",
    (PipelineModel, "group_by"): "the sink's keys (compile_pipeline)",
    (PipelineModel, "aggregates"): "the sink's aggregators (compile_pipeline)",
    (PipelineModel, "state"): "a section",
    (PipelineModel, "errors"): "the topology's error policy (PipelineModel.error_policy)",
    (StateModel, "table"): "the sink's table (compile_pipeline)",
    (StateModel, "tombstones"): "the sink's upsert rule (compile_pipeline)",
    (StateModel, "ttl_s"): "the sink's row expiry (compile_pipeline)",
    (StateModel, "sqlite_path"): "given only for the sqlite backend (state_factory)",
    (KafkaModel, "schema_registry"): "taken by KafkaSpoutConfig through RegistryModel.settings()",
}

#: Defaults that differ on purpose between the service and the Python API, and why.
DIFFERENT_ON_PURPOSE = {
    (CoordinatorConfig, "max_pending"): "the service overlaps a txid's processing with the previous commit (2); "
                                        "the Python API keeps one txid in flight (1)",
    (StateFactory, "sqlite_path"): "the service has a default file; the Python API needs one named",
}


def _model_default(model: type[BaseModel], name: str) -> Any:
    info = model.model_fields[name]
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


@pytest.mark.parametrize(("runtime", "models"), RUNTIME, ids=lambda v: getattr(v, "__name__", ""))
def test_runtime_defaults_are_the_models(runtime: type[Any], models: tuple[type[BaseModel], ...]) -> None:
    """A default written in a dataclass and in its model is the same value (or differs on purpose, listed)."""
    hints = _hints(runtime)
    compared = 0
    for f in dataclasses.fields(runtime):
        model = next((m for m in models if f.name in m.model_fields), None)
        if model is None or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
            continue
        declared = _model_default(model, f.name)
        if declared is PydanticUndefined or (runtime, f.name) in DIFFERENT_ON_PURPOSE:
            continue
        ours = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]  # a field has one or the other
        assert convert(declared, hints[f.name]) == ours, f"{runtime.__name__}.{f.name}: {ours!r} here, " \
                                                         f"{declared!r} in {model.__name__}"  # noqa: ISC002  a long message split for width
        compared += 1
    assert compared or runtime is TopicSettings


def test_every_model_field_reaches_the_runtime() -> None:
    """A model field is taken by a runtime dataclass of the same name, or listed with what reads it instead."""
    taken = {(m, f.name) for runtime, models in RUNTIME for m in models for f in dataclasses.fields(runtime)
             if f.init and f.name in m.model_fields}
    for model in {m for _, models in RUNTIME for m in models}:
        for name in model.model_fields:
            assert (model, name) in taken or (model, name) in READ_ELSEWHERE, \
                f"{model.__name__}.{name} reaches no runtime object: name it like the dataclass field that uses it"


def test_a_config_arrives_whole_in_the_runtime_objects() -> None:
    """Every value written in a config shows in the objects the service runs, converted to their types."""
    cfg = parse({
        "kafka": {"bootstrap_servers": "b:9092", "isolation_level": "read_uncommitted", "request_timeout_s": 7,
                  "read_timeout_s": 11, "properties": {"client.rack": "r1"}},
        "cassandra": {"contact_points": "c1,c2", "port": 9142, "tls": {"enabled": True, "check_hostname": False},
                      "replication": {"class": "NetworkTopologyStrategy", "dc1": 3}},
        "pipelines": [{"id": "p", "spout": {"topics": ["t"], "kind": "transactional", "first_poll": "latest",
                                            "data_loss": "skip", "discovery_interval_s": 5, "group_id": "g",
                                            "caps": {"per_partition": 10, "per_batch": 20},
                                            "value_format": {"type": "json", "fields": {"b": "bigint", "a": "string"}}},
                       "aggregates": ["count"], "max_pending": 3, "retention": 5, "lease_ttl_s": 9,
                       "idle_sleep_s": 0.25, "outage_limit_s": None, "accept_at_least_once": False,
                       "state": {"kind": "transactional", "backend": "cassandra", "cache_size": 7}}]}, {})
    p = cfg.pipelines[0]
    spout = spout_config(cfg, p)
    assert (spout.bootstrap_servers, spout.topics, spout.first_poll.value, spout.data_loss.value) == \
        ("b:9092", ("t",), "latest", "skip")
    assert (spout.isolation_level, spout.request_timeout_s, spout.read_timeout_s, spout.discovery_interval_s,
            spout.group_id, dict(spout.properties)) == ("read_uncommitted", 7, 11, 5, "g", {"client.rack": "r1"})
    assert spout.value_format.fields == (("b", "bigint"), ("a", "string"))  # the declared order is the columns'
    coordinator = coordinator_config(cfg, p)
    assert (coordinator.caps, coordinator.max_pending, coordinator.retention, coordinator.lease_ttl_s,
            coordinator.idle_sleep_s, coordinator.outage_limit_s, coordinator.owner) == \
        (Caps(10, 20), 3, 5, 9, 0.25, None, cfg.service.owner)
    state = state_factory(cfg, p)
    assert (state.kind.value, state.backend, state.sqlite_path, state.cache_size) == \
        ("transactional", "cassandra", None, 7)
    assert state.cassandra is not None
    assert (state.cassandra.contact_points, state.cassandra.port, state.cassandra.tls) == \
        (("c1", "c2"), 9142, TlsSettings(enabled=True, check_hostname=False))
    assert dict(state.cassandra.replication) == {"class": "NetworkTopologyStrategy", "dc1": "3"}


def test_the_guide_s_field_tables_are_the_models() -> None:
    """docs/configuration.md lists every field as the models declare it (regenerate: ``make docs``)."""
    from pathlib import Path

    from app.config.reference import TABLES, refresh

    guide = Path(__file__).parents[2] / "docs" / "configuration.md"
    text = guide.read_text(encoding="utf-8")
    assert all(f"<!-- fields: {name} -->" in text for name in TABLES)
    assert refresh(text) == text, "docs/configuration.md is stale: run make docs"


def test_a_stale_table_is_seen() -> None:
    """The check above can fail: a table edited by hand differs from the generated one."""
    from app.config.reference import refresh

    edited = "<!-- fields: http -->\n| Field | Default | Values | Meaning |\n<!-- end fields -->"
    assert refresh(edited) != edited
    assert "`9400`" in refresh(edited)


@pytest.mark.parametrize(("field", "value"), [("retention", 1), ("max_pending", 0), ("lease_ttl_s", 0)])
def test_the_python_api_refuses_what_the_config_refuses(field: str, value: Any) -> None:
    """A bound the model checks holds for code-built coordinators too."""
    assert PipelineModel.model_json_schema()["properties"][field]  # the model has the field and bounds it
    with pytest.raises(ValueError, match=field):
        CoordinatorConfig(**{field: value})


def test_a_config_without_a_chosen_owner_is_a_config_error() -> None:
    """A document validated without parse() has no lease owner: compiling it names the setting (ConfigError), even
    with assertions off."""
    from app.config import ConfigError

    cfg = parse({"kafka": {"bootstrap_servers": "b:9092"},
                 "pipelines": [{"id": "wc", "spout": {"topics": ["t"]}, "group_by": ["value"],
                                "aggregates": ["count"], "state": {"backend": "sqlite", "sqlite_path": "s.db"}}]}, {})
    unowned = cfg.model_copy(update={"service": cfg.service.model_copy(update={"owner": None})})
    with pytest.raises(ConfigError, match=r"service\.owner"):
        coordinator_config(unowned, unowned.pipelines[0])
