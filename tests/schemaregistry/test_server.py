"""The registry test peer answers confluent-kafka's client as a Confluent Schema Registry does."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from tests.schemaregistry.server import SchemaRegistryServer

V1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "b", "type": ["null", "string"], "default": None}]}
BREAKING = {**V1, "fields": [*V1["fields"], {"name": "c", "type": "string"}]}  # a new field without default


@pytest.fixture
def client() -> Iterator[SchemaRegistryClient]:
    with SchemaRegistryServer() as server:
        yield SchemaRegistryClient({"url": server.url})


def test_register_versions_ids_and_lookups(client: SchemaRegistryClient) -> None:
    first = client.register_schema("s-value", Schema(json.dumps(V1), "AVRO"))
    assert client.register_schema("s-value", Schema(json.dumps(V1), "AVRO")) == first  # same schema: same id
    assert client.register_schema("other-value", Schema(json.dumps(V1), "AVRO")) == first  # one id across subjects
    second = client.register_schema("s-value", Schema(json.dumps(V2), "AVRO"))
    assert second != first
    assert client.get_versions("s-value") == [1, 2]
    latest = client.get_latest_version("s-value")
    assert (latest.version, latest.schema_id, json.loads(latest.schema.schema_str)) == (2, second, V2)
    assert json.loads(client.get_version("s-value", 1).schema.schema_str) == V1
    assert json.loads(client.get_schema(first).schema_str) == V1
    assert client.lookup_schema("s-value", Schema(json.dumps(V2), "AVRO")).version == 2
    assert client.test_compatibility("s-value", Schema(json.dumps(V2), "AVRO")) is True
    assert client.test_compatibility("s-value", Schema(json.dumps(BREAKING), "AVRO")) is False
    assert sorted(client.get_subjects()) == ["other-value", "s-value"]


def test_errors_carry_the_registry_codes(client: SchemaRegistryClient) -> None:
    client.register_schema("s-value", Schema(json.dumps(V1), "AVRO"))
    cases = [(lambda: client.get_schema(999), 404, 40403), (lambda: client.get_latest_version("nope"), 404, 40401),
             (lambda: client.get_version("s-value", 7), 404, 40402),
             (lambda: client.register_schema("s-value", Schema(json.dumps(BREAKING), "AVRO")), 409, 409)]
    for call, status, code in cases:
        with pytest.raises(SchemaRegistryError) as e:
            call()
        assert (e.value.http_status_code, e.value.error_code) == (status, code)


def test_protobuf_and_json_schemas_keep_their_type(client: SchemaRegistryClient) -> None:
    sid = client.register_schema("j-value", Schema(json.dumps({"type": "object"}), "JSON"))
    assert client.get_schema(sid).schema_type == "JSON"
    assert client.get_latest_version("j-value").schema.schema_type == "JSON"
