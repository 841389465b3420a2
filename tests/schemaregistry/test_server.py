"""The registry test peer answers confluent-kafka's client as a Confluent Schema Registry does; its
compatibility checks are run against a real registry too (``[env]``), on subjects of their own."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf import descriptor_pb2

from spouts.kafka.formats import RegistrySettings
from tests.schemaregistry.server import SchemaRegistryServer

V1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "b", "type": ["null", "string"], "default": None}]}
BREAKING = {**V1, "fields": [*V1["fields"], {"name": "c", "type": "string"}]}  # a new field without default
RETYPED = {**V1, "fields": [{"name": "a", "type": "string"}]}  # int -> string: no Avro promotion
PROMOTED = {**V1, "fields": [{"name": "a", "type": "long"}]}  # int -> long: a promotion
EMPTY = {**V1, "fields": []}  # every field removed


def obj(properties: dict[str, Any], closed: bool = False, **more: Any) -> dict[str, Any]:
    """A JSON Schema object; ``closed``: no property but those named (``additionalProperties: false``)."""
    return {"type": "object", "properties": properties, **({"additionalProperties": False} if closed else {}), **more}


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
ITEM_REF = {"i": {"$ref": "#/definitions/it"}}
JSON_EVOLUTIONS = {  # old -> new, and whether a registry at BACKWARD accepts it (as Karapace 3.15 decides)
    "property added to an open model": (obj({"a": INT}), obj({"a": INT, "b": STR}), False),
    "property added to a closed model": (obj({"a": INT}, True), obj({"a": INT, "b": STR}, True), True),
    "property removed from an open model": (obj({"a": INT, "b": STR}), obj({"a": INT}), True),
    "property removed from a closed model": (obj({"a": INT, "b": STR}, True), obj({"a": INT}, True), False),
    "closed model opened": (obj({"a": INT}, True), obj({"a": INT}), True),
    "open model closed": (obj({"a": INT}), obj({"a": INT}, True), False),
    "integer widened to number": (obj({"a": INT}), obj({"a": NUM}), True),
    "number narrowed to integer": (obj({"a": NUM}), obj({"a": INT}), False),
    "integer to string": (obj({"a": INT}), obj({"a": STR}), False),
    "property added to a nested open model": (obj({"o": obj({"x": INT})}, True), obj({"o": obj({"x": INT, "y": STR})}, True),
                                              False),
    "required property added": (obj({"a": INT}, True), obj({"a": INT, "b": STR}, True, required=["b"]), False),
    "property added through a $ref": (obj(ITEM_REF, True, definitions={"it": obj({"x": INT})}),
                                      obj(ITEM_REF, True, definitions={"it": obj({"x": INT, "y": STR})}), False),
}


def avro(schema: dict[str, Any]) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def refused(call: Callable[..., object], *args: Any) -> tuple[int, int]:
    """The HTTP status and registry error code ``call(*args)`` failed with."""
    with pytest.raises(SchemaRegistryError) as e:
        call(*args)
    return e.value.http_status_code, e.value.error_code


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
    assert (latest.version, latest.schema_id, json.loads(cast(str, latest.schema.schema_str))) == (2, second, V2)
    assert json.loads(cast(str, client.get_version("s-value", 1).schema.schema_str)) == V1
    assert json.loads(cast(str, client.get_schema(first).schema_str)) == V1
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


def test_an_incompatible_avro_schema_is_refused_at_the_default_level(schema_registry: RegistrySettings) -> None:
    client, subject = schema_registry.client(), f"compat-{uuid.uuid4().hex[:8]}-value"
    client.register_schema(subject, avro(V1))
    assert refused(client.register_schema, subject, avro(BREAKING)) == (409, 409)
    assert refused(client.register_schema, subject, avro(RETYPED)) == (409, 409)
    client.register_schema(subject, avro(PROMOTED))  # a long reader reads the ints v1 wrote
    back = {**V2, "fields": [{"name": "a", "type": "int"}, V2["fields"][1]]}
    assert refused(client.register_schema, subject, avro(back)) == (409, 409)  # checked against the latest
    client.register_schema(subject, avro(EMPTY))  # a reader without fields reads anything
    assert client.get_versions(subject) == [1, 2, 3]


def test_an_avro_schema_with_references_is_checked_with_them(client: SchemaRegistryClient) -> None:
    """On the peer only: Karapace 3.15 refuses Avro references (44302), Confluent's registry takes them."""
    tag = uuid.uuid4().hex[:8]
    item = {"type": "record", "name": "Item", "namespace": f"shop{tag}", "fields": [{"name": "sku", "type": "string"}]}
    sale = {"type": "record", "name": "Sale", "namespace": f"shop{tag}", "fields": [{"name": "item", "type": "Item"}]}
    client.register_schema(f"item-{tag}", avro(item))
    refs = [SchemaReference(f"shop{tag}.Item", f"item-{tag}", 1)]
    client.register_schema(f"sale-{tag}-value", Schema(json.dumps(sale), "AVRO", refs))
    more: list[dict[str, Any]] = [*cast(list[dict[str, Any]], sale["fields"]), {"name": "n", "type": "int"}]
    assert refused(client.register_schema, f"sale-{tag}-value", Schema(json.dumps({**sale, "fields": more}), "AVRO",
                                                                           refs)) == (409, 409)
    more[1]["default"] = 0
    client.register_schema(f"sale-{tag}-value", Schema(json.dumps({**sale, "fields": more}), "AVRO", refs))
    unknown = {**sale, "fields": [{"name": "item", "type": "Nope"}]}
    assert refused(client.register_schema, f"sale-{tag}-value", Schema(json.dumps(unknown), "AVRO", refs)) == (422, 42201)


def test_a_subject_at_none_accepts_any_avro_schema(schema_registry: RegistrySettings) -> None:
    client, subject = schema_registry.client(), f"compat-{uuid.uuid4().hex[:8]}-value"
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    for schema in (V1, BREAKING, RETYPED, V1):
        client.register_schema(subject, avro(schema))
    assert client.get_versions(subject) == [1, 2, 3]  # V1 again is version 1 again


def test_forward_and_full_levels(schema_registry: RegistrySettings) -> None:
    client, forward, full = schema_registry.client(), f"fwd-{uuid.uuid4().hex[:8]}-value", f"full-{uuid.uuid4().hex[:8]}-value"
    client.set_compatibility(forward, "FORWARD")
    client.set_compatibility(full, "FULL")
    for subject in (forward, full):
        client.register_schema(subject, avro(V1))
        assert refused(client.register_schema, subject, avro(EMPTY)) == (409, 409)  # v1 cannot read it: no a
    client.register_schema(forward, avro(BREAKING))  # v1 reads it, ignoring c
    assert refused(client.register_schema, full, avro(BREAKING)) == (409, 409)  # but it cannot read v1
    client.register_schema(full, avro(V2))  # both ways: b has a default


@pytest.mark.parametrize("change", JSON_EVOLUTIONS)
def test_json_schema_evolutions_at_the_default_level(schema_registry: RegistrySettings, change: str) -> None:
    old, new, accepted = JSON_EVOLUTIONS[change]
    client, subject = schema_registry.client(), f"compat-{uuid.uuid4().hex[:8]}-value"
    client.register_schema(subject, Schema(json.dumps(old), "JSON"))
    if accepted:
        client.register_schema(subject, Schema(json.dumps(new), "JSON"))
    else:
        assert refused(client.register_schema, subject, Schema(json.dumps(new), "JSON")) == (409, 409)


def test_a_subject_level_overrides_the_global_one() -> None:
    with SchemaRegistryServer() as server:
        client = SchemaRegistryClient({"url": server.url})
        assert client.get_compatibility() == "BACKWARD"  # Confluent's default
        client.set_compatibility(level="NONE")
        client.set_compatibility("strict-value", "BACKWARD")
        for subject in ("free-value", "strict-value"):
            client.register_schema(subject, avro(V1))
        client.register_schema("free-value", avro(BREAKING))
        assert refused(client.register_schema, "strict-value", avro(BREAKING)) == (409, 409)
        assert client.test_compatibility("strict-value", avro(BREAKING)) is False
        assert client.get_compatibility("strict-value") == "BACKWARD"
        assert refused(client.get_compatibility, "free-value") == (404, 40408)  # no level of its own
        client.delete_config("strict-value")  # back to the global level
        client.register_schema("strict-value", avro(BREAKING))
        assert refused(client.set_compatibility, "x-value", "SIDEWAYS") == (422, 42203)


def test_a_subject_version_of_protobuf_in_text_as_karapace_answers() -> None:
    fdp = descriptor_pb2.FileDescriptorProto(name="sale.proto", package="shop", syntax="proto3")
    kind = fdp.enum_type.add(name="Kind")
    kind.value.add(name="SALE", number=0)
    sale = fdp.message_type.add(name="Sale")
    f = descriptor_pb2.FieldDescriptorProto
    sale.field.add(name="store", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    sale.field.add(name="kind", number=2, type=f.TYPE_ENUM, type_name=".shop.Kind", label=f.LABEL_OPTIONAL)
    sale.field.add(name="tags", number=3, type=f.TYPE_STRING, label=f.LABEL_REPEATED)
    serialized = base64.b64encode(fdp.SerializeToString()).decode()
    with SchemaRegistryServer(protobuf_versions_as_text=True) as server:
        client = SchemaRegistryClient({"url": server.url})
        sid = client.register_schema("p-value", Schema(serialized, "PROTOBUF"))
        assert client.get_version("p-value", 1, fmt="serialized").schema.schema_str == (
            'syntax = "proto3";\npackage shop;\n\nmessage Sale {\n  string store = 1;\n  .shop.Kind kind = 2;\n'
            '  repeated string tags = 3;\n}\nenum Kind {\n  SALE = 0;\n}\n')  # Karapace 3.15's layout
        assert client.get_schema(sid, fmt="serialized").schema_str == serialized
