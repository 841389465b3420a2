"""Avro through a Schema Registry: each record is read with its writer's schema and resolved to the
reader schema fixed at start-up (Avro schema resolution), so a compatible change of the writers (a
new optional field) keeps the columns as they are. The framing is checked over the whole batch
(:func:`~.registry.framing`), each writer schema fetched once with confluent-kafka's registry client
and parsed once; then fastavro reads one record at a time (Avro has no columnar reader here: this is
the per-record loop, kept to one ``schemaless_reader`` call per record), and the dicts go to Arrow
in one call. Schemas with references to other subjects are not read.

Types: record → struct, array → list, map → map<string, …>, enum → string, fixed/bytes → binary,
int/long → int32/int64, float/double, boolean, string; ``["null", T]`` → nullable T; logical
date, time-millis/micros, timestamp-millis/micros, decimal, uuid. A union of several non-null
types has no Spark column type and is refused at start-up.
"""

from __future__ import annotations

import io
import json
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spouts.kafka.formats.registry import RegistrySettings, framing, reader_schema, rows_to_array
from spouts.kafka.formats.spec import Decoded, Failure, RecordFormat

_PARSED: dict[str, Any] = {}
_LOCK = threading.Lock()
_PRIMITIVES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
               "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}


@dataclass(frozen=True, slots=True)
class AvroDecoder:
    """Decodes Confluent-framed Avro into the reader schema's Arrow type."""

    registry: RegistrySettings
    subject: str
    schema: str  # the reader schema (Avro JSON)

    @classmethod
    def resolve(cls, registry: RegistrySettings, subject: str, fmt: RecordFormat) -> AvroDecoder:
        s = reader_schema(registry, subject, fmt.schema_id, fmt.version, "AVRO")
        decoder = cls(registry, subject, s.schema_str)
        decoder.arrow_type  # noqa: B018 - refuse a schema Spark cannot hold now, not at the first record
        return decoder

    @property
    def arrow_type(self) -> pa.DataType:
        return avro_type(json.loads(self.schema), {})

    def decode(self, values: pa.Array) -> Decoded:
        from fastavro import schemaless_reader

        raw_ids, bad = framing(values, self.registry)
        reader = _parsed(self.schema)
        writers: dict[bytes, Any] = {}
        rows: list[Any] = []
        for i, (v, raw) in enumerate(zip(values.to_pylist(), raw_ids.to_pylist(), strict=True)):
            if raw is None or i in bad:
                rows.append(None)
                continue
            writer = writers.get(raw)
            if writer is None:
                writer = writers[raw] = self._writer(int.from_bytes(raw, "big"))
            if isinstance(writer, Failure):
                bad[i] = writer
                rows.append(None)
                continue
            payload = io.BytesIO(v)
            payload.seek(5)
            try:
                rows.append(schemaless_reader(payload, writer, reader))
            except Exception as e:  # noqa: BLE001 - whatever fastavro raises, the payload is not this schema
                bad[i] = Failure("avro_invalid", f"{type(e).__name__}: {e}")
                rows.append(None)
        return Decoded(rows_to_array(rows, self.arrow_type, bad, "avro_invalid"), bad)

    def _writer(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, or why records framed with it are bad (a schema of
        another type, e.g. a JSON Schema's id on an Avro topic: a bad record, not a batch that never decodes)."""
        schema = self.registry.client().get_schema(schema_id)
        if (schema.schema_type or "AVRO") != "AVRO":
            return Failure("schema_type", f"schema id {schema_id} is a {schema.schema_type} schema, not AVRO")
        try:
            return _parsed(schema.schema_str)
        except Exception as e:  # noqa: BLE001 - whatever fastavro raises, the registered text is no Avro schema
            return Failure("schema_type", f"schema id {schema_id} is no Avro schema: {type(e).__name__}: {e}")


def _parsed(schema: str) -> Any:
    """A schema parsed by fastavro (once per process and schema text)."""
    with _LOCK:
        parsed = _PARSED.get(schema)
        if parsed is None:
            from fastavro import parse_schema

            parsed = _PARSED[schema] = parse_schema(json.loads(schema), named_schemas={})
        return parsed


def avro_type(schema: Any, named: dict[str, pa.DataType], namespace: str = "") -> pa.DataType:
    """The Arrow type of an Avro schema (``named``: the named types seen so far)."""
    if isinstance(schema, str):
        return _named_type(schema, named, namespace)
    if isinstance(schema, list):
        types = [t for t in schema if t != "null"]
        if len(types) != 1:
            msg = f'avro: a union of {types} has no column type (only ["null", T] unions are read)'
            raise ValueError(msg)
        return avro_type(types[0], named, namespace)
    kind = schema["type"]
    t = _logical_type(kind, schema.get("logicalType"), schema)
    if t is None:
        if kind == "record":
            return _record_type(schema, named, namespace)
        t = _complex_type(kind, schema, named, namespace)
    if kind in ("enum", "fixed") and "name" in schema:
        named[schema["name"] if "." in schema["name"] or not namespace else f"{namespace}.{schema['name']}"] = t
    return t


def _named_type(schema: str, named: dict[str, pa.DataType], namespace: str) -> pa.DataType:
    """A primitive, or a named type seen before (by its full name, then as written)."""
    if schema in _PRIMITIVES:
        return _PRIMITIVES[schema]
    full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
    for name in (full, schema):
        if name in named:
            return named[name]
    msg = f"avro: unknown type {schema!r}"
    raise ValueError(msg)


def _logical_type(kind: Any, logical: Any, schema: dict[str, Any]) -> pa.DataType | None:
    """The Arrow type of a logical type Spark holds (None: not one)."""
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(schema["precision"], schema.get("scale", 0))
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("ms" if logical.endswith("millis") else "us", tz="UTC")
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us")  # Spark's TIME holds microseconds; it has no time32
    return None


def _record_type(schema: dict[str, Any], named: dict[str, pa.DataType], namespace: str) -> pa.DataType:
    """A record as a struct, registered under its full name."""
    ns = schema.get("namespace", namespace)
    name = schema["name"] if "." in schema["name"] or not ns else f"{ns}.{schema['name']}"
    named[name] = pa.null()  # a recursive record has no column type: refused below when met
    t = pa.struct([pa.field(f["name"], avro_type(f["type"], named, ns)) for f in schema["fields"]])
    if any(pa.types.is_null(f.type) for f in t):
        msg = f"avro: record {name} refers to itself or holds only null: no column type"
        raise ValueError(msg)
    named[name] = t
    return t


def _complex_type(kind: Any, schema: dict[str, Any], named: dict[str, pa.DataType], namespace: str) -> pa.DataType:
    """An enum, fixed, array or map; any other ``type`` is a type name or a nested schema."""
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(avro_type(schema["items"], named, namespace))
    if kind == "map":
        return pa.map_(pa.string(), avro_type(schema["values"], named, namespace))
    return avro_type(kind, named, namespace)
