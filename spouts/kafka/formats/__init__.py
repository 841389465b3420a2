"""Record formats of the Kafka spout: how a record's key and value become typed Arrow columns.

:class:`RecordFormat` is what a config says; :func:`resolve` turns it into a column decoder
(registry formats fix their reader schema here, on the driver, before the first batch);
:class:`BatchDecoder` applies a key and a value decoder to each raw batch on the executors.
Modules: :mod:`.spec` (formats and declared types), :mod:`.plain` (bytes, string),
:mod:`.json_fields` (JSON with declared fields), :mod:`.avro`, :mod:`.protobuf`, :mod:`.json_schema`
(registry formats), :mod:`.registry` (registry settings and client), :mod:`.decode` (batches).
"""

from __future__ import annotations

from spouts.kafka.formats.decode import BatchDecoder, ColumnDecoder, decoded_schema
from spouts.kafka.formats.json_fields import JsonDecoder
from spouts.kafka.formats.plain import BytesDecoder, StringDecoder
from spouts.kafka.formats.registry import RegistrySettings
from spouts.kafka.formats.spec import BYTES, FIELD_TYPES, Decoded, Failure, FormatType, RecordFormat


def resolve(fmt: RecordFormat, topics: tuple[str, ...], part: str, registry: RegistrySettings | None) -> ColumnDecoder:
    """The decoder of ``fmt`` for the key or value (``part``) of ``topics``.

    Registry formats ask the registry for their reader schema now (raises ValueError when it has
    none, or when no registry is configured).
    """
    if fmt.type is FormatType.BYTES:
        return BytesDecoder()
    if fmt.type is FormatType.STRING:
        return StringDecoder()
    if fmt.type is FormatType.JSON:
        return JsonDecoder(fmt.fields)
    if registry is None:
        msg = f"{part}_format {fmt.type.value} needs a schema registry (schema_registry: {{url: ...}})"
        raise ValueError(msg)
    subject = fmt.subject_for(topics, part)
    if fmt.type is FormatType.AVRO:
        from spouts.kafka.formats.avro import AvroDecoder

        return AvroDecoder.resolve(registry, subject, fmt)
    if fmt.type is FormatType.PROTOBUF:
        from spouts.kafka.formats.protobuf import ProtobufDecoder

        return ProtobufDecoder.resolve(registry, subject, fmt)
    from spouts.kafka.formats.json_schema import JsonSchemaDecoder

    return JsonSchemaDecoder.resolve(registry, subject, fmt)


__all__ = [
    "BYTES",
    "FIELD_TYPES",
    "BatchDecoder",
    "BytesDecoder",
    "ColumnDecoder",
    "Decoded",
    "Failure",
    "FormatType",
    "JsonDecoder",
    "RecordFormat",
    "RegistrySettings",
    "StringDecoder",
    "decoded_schema",
    "resolve",
]
