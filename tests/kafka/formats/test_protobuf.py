"""Protobuf through the Schema Registry: records of an evolved writer message read as the start-up
message (matched by field number), presence kept as null, bad records reported with their reason;
the reader schema read from a registry whose subject versions answer the ``.proto`` text (Karapace)."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from spouts.bad_records import Stage
from spouts.kafka.arrow import SCHEMA
from spouts.kafka.formats import BatchDecoder, RecordFormat, RegistrySettings, decoded_schema, resolve
from spouts.kafka.formats.protobuf import ProtobufDecoder
from tests.kafka.formats.helpers import Collected, raw_batch
from tests.schemaregistry.server import SchemaRegistryServer

F = descriptor_pb2.FieldDescriptorProto


def sale_class(version: int) -> Any:
    """shop.Sale: v1 store, amount, kind (enum), item (message), tags; v2 adds note (field 6)."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"sale_v{version}_{uuid.uuid4().hex[:6]}.proto", package="shop",
                                             syntax="proto3")
    enum = fdp.enum_type.add(name="Kind")
    enum.value.add(name="SALE", number=0)
    enum.value.add(name="REFUND", number=1)
    m = fdp.message_type.add(name="Sale")  # the first message: what a record is read as unless told
    item = fdp.message_type.add(name="Item")
    item.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="store", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="amount", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="kind", number=3, type=F.TYPE_ENUM, type_name=".shop.Kind", label=F.LABEL_OPTIONAL)
    m.field.add(name="item", number=4, type=F.TYPE_MESSAGE, type_name=".shop.Item", label=F.LABEL_OPTIONAL)
    m.field.add(name="tags", number=5, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    if version >= 2:
        m.field.add(name="note", number=6, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Sale"))


def serializer(registry: RegistrySettings, cls: Any, topic: str) -> Any:
    s = ProtobufSerializer(cls, registry.client(), {"use.deprecated.format": False})
    return lambda **fields: s(cls(**fields), SerializationContext(topic, MessageField.VALUE))


def decoder(registry: RegistrySettings, topic: str, **fmt: Any) -> BatchDecoder:
    value = resolve(RecordFormat.of({"type": "protobuf", **fmt}), (topic,), "value", registry)
    key = resolve(RecordFormat(), (topic,), "key", registry)
    return BatchDecoder(key, value, decoded_schema(SCHEMA, key, value))


def test_protobuf_records_of_an_evolved_writer_read_as_the_start_up_message(schema_registry: RegistrySettings) -> None:
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    v1 = serializer(schema_registry, sale_class(1), topic)
    first = v1(store="a", amount=5, kind=1, item={"sku": "x1"}, tags=["t1", "t2"])
    empty = v1()
    d = decoder(schema_registry, topic)
    later = serializer(schema_registry, sale_class(2), topic)(store="b", amount=7, note="new")
    bad = Collected()
    out = d.decode(raw_batch([first, empty, None, later]), bad)
    assert bad == []
    assert out.schema.field("value").type == pa.struct([
        ("store", pa.string()), ("amount", pa.int64()), ("kind", pa.string()), ("item", pa.struct([("sku", pa.string())])),
        ("tags", pa.list_(pa.string()))])
    assert out.column("value").to_pylist() == [
        {"store": "a", "amount": 5, "kind": "REFUND", "item": {"sku": "x1"}, "tags": ["t1", "t2"]},
        {"store": "", "amount": 0, "kind": "SALE", "item": None, "tags": []},  # proto3 defaults; an unset message is null
        None,
        {"store": "b", "amount": 7, "kind": "SALE", "item": None, "tags": []}]


def test_protobuf_bad_records(schema_registry: RegistrySettings) -> None:
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    good = serializer(schema_registry, sale_class(1), topic)(store="a", amount=1)
    framing = good[:6]  # magic byte, schema id, message index
    values = [good, b"no framing", b"\x00" + struct.pack(">I", 876_543) + good[5:], framing + b"\xff\xff\xff", good]
    bad = Collected()
    out = decoder(schema_registry, topic).decode(raw_batch(values, topic=topic, partition=0, first_offset=10), bad)
    assert [(r.topic, r.partition, r.stage) for r in bad] == [(topic, 0, Stage.DECODE)] * 3
    assert bad.by_offset() == {11: "wire_format", 12: "schema_unknown", 13: "protobuf_invalid"}
    assert out.column("offset").to_pylist() == [10, 14]


def test_protobuf_message_named_in_the_config(schema_registry: RegistrySettings) -> None:
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    sale = sale_class(1)
    serializer(schema_registry, sale, topic)(store="a")
    item = message_factory.GetMessageClass(sale.DESCRIPTOR.file.pool.FindMessageTypeByName("shop.Item"))
    written = serializer(schema_registry, item, topic)(sku="x9")  # message indexes [1] after the schema id
    d = decoder(schema_registry, topic, message="shop.Item")
    assert d.schema.field("value").type == pa.struct([("sku", pa.string())])
    assert d.decode(raw_batch([written]), None).column("value").to_pylist() == [{"sku": "x9"}]
    with pytest.raises(ValueError, match=r"no message 'shop.Nope'"):
        decoder(schema_registry, topic, message="shop.Nope")


def test_unsigned_and_every_scalar_type_fit_spark(schema_registry: RegistrySettings) -> None:
    from pyspark.sql.pandas.types import from_arrow_type

    fdp = descriptor_pb2.FileDescriptorProto(name=f"all_{uuid.uuid4().hex[:6]}.proto", package="all", syntax="proto3")
    m = fdp.message_type.add(name="All")
    kinds = [F.TYPE_DOUBLE, F.TYPE_FLOAT, F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_INT32, F.TYPE_FIXED64, F.TYPE_FIXED32,
             F.TYPE_BOOL, F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_UINT32, F.TYPE_SFIXED32, F.TYPE_SFIXED64, F.TYPE_SINT32,
             F.TYPE_SINT64]
    for i, kind in enumerate(kinds, 1):
        m.field.add(name=f"f{i}", number=i, type=kind, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("all.All"))
    topic = f"pb-{uuid.uuid4().hex[:8]}"
    written = serializer(schema_registry, cls, topic)(f4=2**64 - 1, f11=2**32 - 1, f3=-5)
    d = decoder(schema_registry, topic)
    from_arrow_type(d.schema.field("value").type)  # Spark holds it
    [row] = d.decode(raw_batch([written]), None).column("value").to_pylist()
    assert (row["f4"], row["f11"], row["f3"]) == (2**64 - 1, 2**32 - 1, -5)


def test_protobuf_reader_schema_from_a_registry_answering_versions_in_text() -> None:
    with SchemaRegistryServer(protobuf_versions_as_text=True) as server:
        registry = RegistrySettings(server.url)
        topic = f"pb-{uuid.uuid4().hex[:8]}"
        written = serializer(registry, sale_class(1), topic)(store="a", amount=3, tags=["t"])
        serializer(registry, sale_class(2), topic)(store="b")
        assert registry.client().get_version(f"{topic}-value", 1, fmt="serialized").schema.schema_str.startswith(
            'syntax = "proto3";')  # what the decoder cannot parse: it asks for the schema by id
        for fmt in ({}, {"version": 1}):
            d = decoder(registry, topic, **fmt)
            [row] = d.decode(raw_batch([written]), None).column("value").to_pylist()
            assert (row["store"], row["amount"], row["tags"]) == ("a", 3, ["t"])
            assert ("note" in row) == (fmt == {})  # latest: v2; version 1: v1


def test_a_registry_serving_no_serialized_protobuf_schema_is_refused_at_start_up() -> None:
    text = 'syntax = "proto3";\npackage shop;\n\nmessage Sale {\n  string store = 1;\n}\n'
    with pytest.raises(ValueError, match="did not serve the reader schema as a serialized FileDescriptorProto"):
        ProtobufDecoder(RegistrySettings("http://127.0.0.1:9"), "s-value", text, None).arrow_type  # noqa: B018
