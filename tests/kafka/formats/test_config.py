"""Formats in the config file: compiled onto the spout, bad ones refused by ``validate`` at their field."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import parse
from app.config.compile import compile_pipeline, describe
from spouts.kafka.formats import FormatType, RecordFormat
from spouts.kafka.spout import KafkaSpout
from tests.service.test_config import doc, error

JSON_SALES = {"type": "json", "fields": {"store": "string", "amount": "decimal(12,2)"}}
REGISTRY = {"url": "https://registry:8081", "ca_file": "/etc/ca.pem"}


def test_formats_and_registry_reach_the_spout_with_secrets_from_the_environment() -> None:
    d = doc(pipelines__0__spout__key_format="string", pipelines__0__spout__value_format=JSON_SALES,
            kafka__schema_registry={**REGISTRY, "username": "svc"})
    config = parse(d, {"TRIDENT_SCHEMA_REGISTRY_PASSWORD": "sr-s3cret"})
    compiled = compile_pipeline(config, "word-count")
    spout = compiled.topology.spout
    assert isinstance(spout, KafkaSpout)
    spout_config = spout.config
    assert spout_config.key_format == RecordFormat(FormatType.STRING)
    assert spout_config.value_format == RecordFormat.of(JSON_SALES)
    registry = spout_config.schema_registry
    assert registry is not None
    assert (registry.url, registry.username, registry.password, registry.ca_file) == (
        "https://registry:8081", "svc", "sr-s3cret", "/etc/ca.pem")
    assert registry.client_config()["basic.auth.user.info"] == "svc:sr-s3cret"
    shown = repr(spout_config) + repr(describe(compiled.topology, compiled.coordinator))
    assert "sr-s3cret" not in shown
    assert "decimal(12,2)" in shown


def test_avro_through_the_registry_is_accepted() -> None:
    d = doc(pipelines__0__spout__value_format={"type": "avro", "version": 3}, kafka__schema_registry=REGISTRY)
    fmt = parse(d, {}).pipelines[0].spout.value_format.format()
    assert (fmt.type, fmt.version, fmt.subject_for(("sentences",), "value")) == (FormatType.AVRO, 3, "sentences-value")


@pytest.mark.parametrize(("changes", "path", "message"), [
    ({"pipelines__0__spout__value_format": "yaml"}, "pipelines[0].spout.value_format.type", "not one of"),
    ({"pipelines__0__spout__value_format": {"type": "json"}}, "pipelines[0].spout.value_format", "needs fields"),
    ({"pipelines__0__spout__value_format": {"type": "json", "fields": {"n": "number"}}},
     "pipelines[0].spout.value_format", "unknown field type 'number'"),
    ({"pipelines__0__spout__value_format": {"type": "string", "fields": {"n": "int"}}},
     "pipelines[0].spout.value_format", "json only"),
    ({"pipelines__0__spout__key_format": {"type": "avro", "fields": {"n": "int"}}},
     "pipelines[0].spout.key_format", "json only"),
    ({"pipelines__0__spout__value_format": "avro"}, "pipelines[0].spout.value_format",
     "needs kafka.schema_registry"),
    ({"pipelines__0__spout__value_format": {"type": "avro", "version": 0}, "kafka__schema_registry": REGISTRY},
     "pipelines[0].spout.value_format.version", ">= 1"),
    ({"pipelines__0__spout__value_format": "protobuf", "pipelines__0__spout__topics": None,
      "pipelines__0__spout__topic_pattern": "sales-.*", "kafka__schema_registry": REGISTRY},
     "pipelines[0].spout.value_format.subject", "set subject"),
    ({"pipelines__0__spout__value_format": {"type": "avro", "version": 1, "schema_id": 4},
      "kafka__schema_registry": REGISTRY}, "pipelines[0].spout.value_format", "at most one"),
    ({"kafka__schema_registry": {"url": "registry:8081"}}, "kafka.schema_registry", "http:// or https://"),
    ({"kafka__schema_registry": {"url": "http://r:8081", "cert_file": "/c.pem"}}, "kafka.schema_registry",
     "both cert_file and key_file"),
    ({"kafka__schema_registry": {"url": "http://r:8081", "username": "u"}}, "kafka.schema_registry.password",
     "set TRIDENT_SCHEMA_REGISTRY_PASSWORD"),
    ({"kafka__schema_registry": {"url": "http://r:8081", "password": "p"}}, "kafka.schema_registry",
     "both username and password"),
])
def test_validate_refuses_bad_format_config(changes: dict[str, Any], path: str, message: str) -> None:
    e = error(doc(**changes))
    assert e.path == path, (e.path, e.message)
    assert message in e.message, (e.path, e.message)
