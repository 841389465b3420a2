"""The decode cost of the record formats: records/s of each format as a ratio of the plain string path.

    python -m tests.bench decode [--records 200000] [--batch 65536] [--repeat 3]

The same sales documents (``store``, ``amount``, ``price``, ``text``) encoded as each format,
decoded from raw Arrow batches (:data:`spouts.kafka.arrow.SCHEMA`) by the spout's
:class:`~spouts.kafka.formats.BatchDecoder`, as executors do after the Kafka read: ``string``
(a validating cast: the baseline), ``json`` with declared types (Arrow's JSON reader), ``avro``,
``protobuf`` and ``json_schema`` through the Schema Registry test peer (in process; each writer
schema is fetched once, then cached). Kafka itself is left out: this is the decode step alone.
Prints records/s and the ratio to ``string`` per repetition, then the median ratios. The string
path is one validating cast of the whole column, so every other format's ratio is small: what the
numbers compare is each format's records/s against the cost of the rest of a batch (reading it
from Kafka, the transforms, the commit).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from spouts.kafka.arrow import SCHEMA
from spouts.kafka.formats import BatchDecoder, RecordFormat, RegistrySettings, decoded_schema, resolve
from tests.schemaregistry.server import SchemaRegistryServer

FIELDS = {"store": "string", "amount": "bigint", "price": "double", "text": "string"}
AVRO = {"type": "record", "name": "Sale", "fields": [
    {"name": "store", "type": "string"}, {"name": "amount", "type": "long"}, {"name": "price", "type": "double"},
    {"name": "text", "type": "string"}]}
JSON_SCHEMA = {"type": "object", "properties": {"store": {"type": "string"}, "amount": {"type": "integer"},
                                                "price": {"type": "number"}, "text": {"type": "string"}}}


def documents(n: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    words = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog")
    return [{"store": f"store-{rng.randrange(50)}", "amount": rng.randint(-100, 10_000), "price": rng.random() * 100,
             "text": " ".join(rng.choice(words) for _ in range(6))} for _ in range(n)]


def raw_batches(values: list[bytes], batch: int) -> list[pa.RecordBatch]:
    out = []
    for lo in range(0, len(values), batch):
        chunk = values[lo:lo + batch]
        n = len(chunk)
        out.append(pa.RecordBatch.from_arrays([
            pa.repeat(pa.scalar("bench", pa.string()), n), pa.repeat(pa.scalar(0, pa.int32()), n),
            pa.array(range(lo, lo + n), pa.int64()), pa.repeat(pa.scalar(0, SCHEMA.field("timestamp").type), n),
            pa.nulls(n, pa.binary()), pa.array(chunk, pa.binary()), pa.array([[]] * n, SCHEMA.field("headers").type),
        ], schema=SCHEMA))
    return out


def encoders(registry: RegistrySettings) -> dict[str, tuple[RecordFormat, Callable[[dict[str, Any]], bytes]]]:
    """Each format, and how a document is written in it (registering its schema under bench-<format>-value)."""
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = registry.client()

    def framed(serializer: Any, topic: str) -> Callable[[dict[str, Any]], bytes]:
        ctx = SerializationContext(topic, MessageField.VALUE)
        return lambda d: serializer(d, ctx)

    out: dict[str, tuple[RecordFormat, Callable[[dict[str, Any]], bytes]]] = {
        "string": (RecordFormat.of("string"), lambda d: f"{d['store']},{d['amount']},{d['price']},{d['text']}".encode()),
        "json": (RecordFormat.of({"type": "json", "fields": FIELDS}), lambda d: json.dumps(d).encode()),
        "avro": (RecordFormat.of({"type": "avro", "subject": "bench-avro-value"}),
                 framed(AvroSerializer(client, json.dumps(AVRO)), "bench-avro")),
        "json_schema": (RecordFormat.of({"type": "json_schema", "subject": "bench-json_schema-value"}),
                        framed(JSONSerializer(json.dumps(JSON_SCHEMA), client), "bench-json_schema")),
    }
    out["protobuf"] = _protobuf(registry)
    return out


def _protobuf(registry: RegistrySettings) -> tuple[RecordFormat, Callable[[dict[str, Any]], bytes]]:
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="bench_sale.proto", package="bench", syntax="proto3")
    m = fdp.message_type.add(name="Sale")
    for i, (name, t) in enumerate([("store", f.TYPE_STRING), ("amount", f.TYPE_INT64), ("price", f.TYPE_DOUBLE),
                                   ("text", f.TYPE_STRING)], 1):
        m.field.add(name=name, number=i, type=t, label=f.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Sale"))
    ser = ProtobufSerializer(cls, registry.client(), {"use.deprecated.format": False})
    ctx = SerializationContext("bench-protobuf", MessageField.VALUE)
    return RecordFormat.of({"type": "protobuf", "subject": "bench-protobuf-value"}), lambda d: ser(cls(**d), ctx)


def rate(decoder: BatchDecoder, batches: list[pa.RecordBatch]) -> float:
    """Records decoded per second (every record must decode)."""
    start = time.perf_counter()
    n = 0
    for b in batches:
        n += decoder.decode(b, None).num_rows
    return n / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=65_536, help="records per raw Arrow batch")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    docs = documents(args.records)
    print(f"load: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores; {args.records} records, "
          f"batches of {args.batch}")
    ratios: dict[str, list[float]] = {}
    with SchemaRegistryServer() as server:
        registry = RegistrySettings(server.url)
        formats = {}
        for name, (fmt, encode) in encoders(registry).items():
            batches = raw_batches([encode(d) for d in docs], args.batch)
            value = resolve(fmt, ("bench",), "value", registry)
            key = resolve(RecordFormat(), ("bench",), "key", registry)
            decoder = BatchDecoder(key, value, decoded_schema(SCHEMA, key, value))
            decoder.decode(batches[0].slice(0, 10), None)  # warm: writer schema fetched and cached
            formats[name] = (decoder, batches)
        for rep in range(1, args.repeat + 1):
            rates = {name: rate(d, b) for name, (d, b) in formats.items()}
            base = rates["string"]
            print(f"repetition {rep}: " + ", ".join(f"{n} {r:,.0f}/s ({r / base:.5f})" for n, r in rates.items()))
            for n, r in rates.items():
                ratios.setdefault(n, []).append(r / base)
    medians = {n: statistics.median(r) for n, r in ratios.items()}
    print("median ratio to string: " + ", ".join(f"{n} {m:.5f} (1/{1 / m:,.0f})" for n, m in medians.items()))
    return medians
