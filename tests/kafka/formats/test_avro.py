"""Avro through the Schema Registry: records of every registered, compatible writer schema read as
the reader schema fixed at start-up; each kind of bad record reported with its coordinates."""

from __future__ import annotations

import datetime as dt
import json
import struct
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spouts.bad_records import Stage
from spouts.kafka.arrow import SCHEMA
from spouts.kafka.formats import BatchDecoder, RecordFormat, RegistrySettings, decoded_schema, resolve
from spouts.kafka.formats.avro import avro_type
from tests.kafka.formats.helpers import Collected, raw_batch

SALE_V1 = {"type": "record", "name": "Sale", "namespace": "shop", "fields": [
    {"name": "store", "type": "string"}, {"name": "amount", "type": "long"}]}
SALE_V2 = {**SALE_V1, "fields": [*SALE_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
OTHER = {"type": "record", "name": "Other", "fields": [{"name": "x", "type": "double"}]}


def serializer(registry: RegistrySettings, schema: dict[str, Any]) -> Any:
    s = AvroSerializer(registry.client(), json.dumps(schema), conf={"auto.register.schemas": True})
    return lambda topic, doc: s(doc, SerializationContext(topic, MessageField.VALUE))


def decoder(registry: RegistrySettings, topic: str, **fmt: Any) -> BatchDecoder:
    value = resolve(RecordFormat.of({"type": "avro", **fmt}), (topic,), "value", registry)
    key = resolve(RecordFormat(), (topic,), "key", registry)
    return BatchDecoder(key, value, decoded_schema(SCHEMA, key, value))


def test_avro_records_of_two_compatible_writer_schemas_read_as_the_start_up_schema(
        schema_registry: RegistrySettings) -> None:
    topic = f"sales-{uuid.uuid4().hex[:8]}"
    v1 = serializer(schema_registry, SALE_V1)
    first = [v1(topic, {"store": f"s{i}", "amount": i}) for i in range(3)]
    d = decoder(schema_registry, topic)  # latest at start-up: v1
    v2 = serializer(schema_registry, SALE_V2)  # a compatible change: a new optional field
    later = [v2(topic, {"store": "s9", "amount": 9, "note": "new"})]
    bad = Collected()
    out = d.decode(raw_batch([*first, None, *later]), bad)
    assert bad == []
    assert out.schema.field("value").type == pa.struct([("store", pa.string()), ("amount", pa.int64())])
    assert out.column("value").to_pylist() == [{"store": "s0", "amount": 0}, {"store": "s1", "amount": 1},
                                               {"store": "s2", "amount": 2}, None, {"store": "s9", "amount": 9}]
    # a restart after the change reads the new field; records of v1 get its default
    out = decoder(schema_registry, topic).decode(raw_batch([first[0], later[0]]), bad)
    assert out.column("value").to_pylist() == [{"store": "s0", "amount": 0, "note": None},
                                               {"store": "s9", "amount": 9, "note": "new"}]
    # a pinned version reads as that version
    out = decoder(schema_registry, topic, version=1).decode(raw_batch([later[0]]), bad)
    assert out.column("value").to_pylist() == [{"store": "s9", "amount": 9}]


def test_avro_bad_records_are_reported_with_coordinates_and_reason(schema_registry: RegistrySettings) -> None:
    topic = f"sales-{uuid.uuid4().hex[:8]}"
    good = serializer(schema_registry, SALE_V1)(topic, {"store": "a", "amount": 1})
    other = serializer(schema_registry, OTHER)(f"{topic}-other", {"x": 1.5})  # registered, not resolvable to Sale
    unknown_id = b"\x00" + struct.pack(">I", 987_654) + good[5:]
    values = [good, b"plain text, no framing", unknown_id, good[:7], other, good, b"", b"\x00\x00"]
    bad = Collected()
    out = decoder(schema_registry, topic).decode(raw_batch(values, topic=topic, partition=1, first_offset=50), bad)
    assert [(r.topic, r.partition, r.stage) for r in bad] == [(topic, 1, Stage.DECODE)] * 6
    assert bad.by_offset() == {51: "wire_format", 52: "schema_unknown", 53: "avro_invalid", 54: "avro_invalid",
                               56: "wire_format", 57: "wire_format"}
    assert out.column("offset").to_pylist() == [50, 55]
    assert out.column("value").to_pylist() == [{"store": "a", "amount": 1}] * 2


def test_a_subject_without_schema_is_refused_at_start_up(schema_registry: RegistrySettings) -> None:
    with pytest.raises(ValueError, match="the schema registry has no schema under subject"):
        decoder(schema_registry, f"nothing-{uuid.uuid4().hex[:8]}")


def test_avro_types_map_to_arrow() -> None:
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "b", "type": "boolean"}, {"name": "i", "type": "int"}, {"name": "f", "type": "float"},
        {"name": "raw", "type": "bytes"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "inner", "type": ["null", {"type": "record", "name": "In", "fields": [{"name": "c", "type": "Color"}]}]},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
    ]}
    assert avro_type(schema, {}) == pa.struct([
        ("b", pa.bool_()), ("i", pa.int32()), ("f", pa.float32()), ("raw", pa.binary()), ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int64())), ("color", pa.string()), ("day", pa.date32()),
        ("at", pa.timestamp("ms", tz="UTC")), ("price", pa.decimal128(9, 2)), ("inner", pa.struct([("c", pa.string())])),
        ("t", pa.time64("us"))])
    from pyspark.sql.pandas.types import from_arrow_type

    from_arrow_type(avro_type(schema, {}))  # Spark holds every column type the mapping makes
    with pytest.raises(ValueError, match="union"):
        avro_type({"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}, {})


def test_logical_types_decode(schema_registry: RegistrySettings) -> None:
    topic = f"typed-{uuid.uuid4().hex[:8]}"
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}}]}
    at = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    value = serializer(schema_registry, schema)(topic, {"at": at, "price": Decimal("12.34"), "attrs": {"a": 1}})
    out = decoder(schema_registry, topic).decode(raw_batch([value]), None)
    [row] = out.column("value").to_pylist()
    assert row == {"at": at, "price": Decimal("12.34"), "attrs": [("a", 1)]}


def test_the_decoder_pickles_without_a_client(registry_server: Any) -> None:
    import pickle

    registry = RegistrySettings(registry_server.url)
    topic = f"p-{uuid.uuid4().hex[:8]}"
    registry.client().register_schema(f"{topic}-value", Schema(json.dumps(SALE_V1), "AVRO"))
    d = pickle.loads(pickle.dumps(decoder(registry, topic)))
    assert d.value.schema == json.dumps(SALE_V1) or json.loads(d.value.schema) == SALE_V1


def test_avro_keys_read_from_the_key_subject(schema_registry: RegistrySettings) -> None:
    topic = f"keys-{uuid.uuid4().hex[:8]}"
    key_schema = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}
    ser = AvroSerializer(schema_registry.client(), json.dumps(key_schema))
    keys = [ser({"id": i}, SerializationContext(topic, MessageField.KEY)) for i in range(3)]
    assert schema_registry.client().get_versions(f"{topic}-key") == [1]
    key = resolve(RecordFormat.of("avro"), (topic,), "key", schema_registry)
    value = resolve(RecordFormat.of("string"), (topic,), "value", schema_registry)
    out = BatchDecoder(key, value, decoded_schema(SCHEMA, key, value)).decode(
        raw_batch([b"a", b"b", None], keys=[keys[0], None, keys[2]]), None)
    assert out.column("key").to_pylist() == [{"id": 0}, None, {"id": 2}]
    assert out.column("value").to_pylist() == ["a", "b", None]
