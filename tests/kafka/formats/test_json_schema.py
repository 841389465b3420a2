"""JSON Schema through the Schema Registry: framed JSON read into the start-up schema's columns,
a new optional property of a later writer schema ignored, each kind of bad record reported.

The Sale schemas evolve as a registry at its default level (BACKWARD) allows: a property is added
to a closed content model (``additionalProperties: false``); added to an open one, it restricts
what the property's values may be, which Karapace and Confluent refuse. Karapace serves a JSON
schema with its keys sorted, so the columns' order is the registry's: types are compared by name."""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any, cast

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spouts.bad_records import Stage
from spouts.kafka.arrow import SCHEMA
from spouts.kafka.formats import BatchDecoder, RecordFormat, RegistrySettings, decoded_schema, resolve
from spouts.kafka.formats.json_schema import json_schema_type
from tests.kafka.formats.helpers import Collected, raw_batch

SALE_V1 = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Sale", "type": "object",
           "properties": {"store": {"type": "string"}, "amount": {"type": "integer"},
                          "items": {"type": "array", "items": {"$ref": "#/definitions/item"}}},
           "required": ["store", "amount"], "additionalProperties": False,
           "definitions": {"item": {"type": "object", "properties": {"sku": {"type": "string"},
                                                                      "price": {"type": ["number", "null"]}}}}}
SALE_V2 = {**SALE_V1, "properties": {**cast(dict[str, Any], SALE_V1["properties"]), "note": {"type": "string"}}}


def serializer(registry: RegistrySettings, schema: dict[str, Any], topic: str) -> Any:
    s = JSONSerializer(json.dumps(schema), registry.client())
    return lambda doc: s(doc, SerializationContext(topic, MessageField.VALUE))


def decoder(registry: RegistrySettings, topic: str) -> BatchDecoder:
    value = resolve(RecordFormat.of("json_schema"), (topic,), "value", registry)
    key = resolve(RecordFormat(), (topic,), "key", registry)
    return BatchDecoder(key, value, decoded_schema(SCHEMA, key, value))


def by_name(t: pa.DataType) -> pa.DataType:
    """``t`` with the fields of each struct in it sorted by name."""
    if pa.types.is_struct(t):
        return pa.struct(sorted((pa.field(f.name, by_name(f.type)) for f in t), key=lambda f: f.name))
    if pa.types.is_list(t):
        return pa.list_(by_name(t.value_type))
    return t


def test_json_schema_records_read_as_the_start_up_schema(schema_registry: RegistrySettings) -> None:
    topic = f"js-{uuid.uuid4().hex[:8]}"
    first = serializer(schema_registry, SALE_V1, topic)({"store": "a", "amount": 3, "items": [{"sku": "x", "price": 1.5}]})
    d = decoder(schema_registry, topic)
    later = serializer(schema_registry, SALE_V2, topic)({"store": "b", "amount": 4, "note": "new"})
    bad = Collected()
    out = d.decode(raw_batch([first, None, later]), bad)
    assert bad == []
    assert by_name(out.schema.field("value").type) == by_name(pa.struct([
        ("store", pa.string()), ("amount", pa.int64()),
        ("items", pa.list_(pa.struct([("sku", pa.string()), ("price", pa.float64())])))]))
    assert out.column("value").to_pylist() == [{"store": "a", "amount": 3, "items": [{"sku": "x", "price": 1.5}]}, None,
                                               {"store": "b", "amount": 4, "items": None}]


def test_json_schema_bad_records(schema_registry: RegistrySettings) -> None:
    topic = f"js-{uuid.uuid4().hex[:8]}"
    good = serializer(schema_registry, SALE_V1, topic)({"store": "a", "amount": 1})
    header = good[:5]
    values = [good, b'{"store": "no framing"}', b"\x00" + struct.pack(">I", 765_432) + good[5:],
              header + b'{"store": "a", "amount": "lots"}', header + b"{not json", good]
    bad = Collected()
    out = decoder(schema_registry, topic).decode(raw_batch(values, topic=topic, partition=3, first_offset=0), bad)
    assert [(r.topic, r.partition, r.stage) for r in bad] == [(topic, 3, Stage.DECODE)] * 4
    assert bad.by_offset() == {1: "wire_format", 2: "schema_unknown", 3: "json_type", 4: "json_invalid"}
    assert out.column("offset").to_pylist() == [0, 5]


def test_json_schema_types() -> None:
    schema = {"type": "object", "properties": {
        "at": {"type": "string", "format": "date-time"}, "ok": {"type": "boolean"},
        "n": {"anyOf": [{"type": "null"}, {"type": "integer"}]}, "tags": {"type": "array", "items": {"type": "string"}}}}
    assert json_schema_type(schema, schema) == pa.struct([("at", pa.timestamp("us", tz="UTC")), ("ok", pa.bool_()),
                                                          ("n", pa.int64()), ("tags", pa.list_(pa.string()))])
    for refused in ({"type": ["string", "integer"]}, {"type": "object", "additionalProperties": {"type": "string"}},
                    {"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"$ref": "other.json#/x"}):
        with pytest.raises(ValueError, match="json_schema"):
            json_schema_type(refused, refused)
