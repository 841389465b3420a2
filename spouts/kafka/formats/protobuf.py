"""Protobuf through a Schema Registry: each record parsed as the reader message fixed at start-up.

Protobuf's own evolution rules resolve a writer's message to the reader's (fields are matched by
number: a field the reader lacks is skipped, one the writer lacks has its default), so records
of every compatible writer schema decode into the same columns. The framing and the writer's schema
id are checked over the whole batch (:func:`~.registry.framing`); then each record's message
indexes are skipped and its payload parsed by the reader message class, one record at a time (no
columnar reader exists), and the fields read off each message into rows for one Arrow call.

Types: scalars as themselves (Spark has no unsigned types: uint32 as int64, uint64 as
decimal(20,0)), enum → string (its name), message → struct, repeated → list, map → map. A message field or an ``optional`` scalar that is not set is
null; a plain proto3 scalar that is not set is its default (0, "", false), as Protobuf defines.

The reader schema is the registry's ``serialized`` form (a base64 FileDescriptorProto), always
fetched by schema id (a configured version is first resolved to its id): Karapace answers
``/subjects/{s}/versions/{v}?format=serialized`` with the ``.proto`` text and serves the serialized
form only at ``/schemas/ids/{id}``, where Confluent's registry serves the same bytes as at the
version. The id is in every version's answer, so one more request at start-up replaces a ``.proto``
parser (protoc) in the product. A registry that serves no serialized form is refused at start-up.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from spouts.kafka.formats.registry import RegistrySettings, framing, reader_schema, rows_to_array
from spouts.kafka.formats.spec import Decoded, Failure, RecordFormat

_CLASSES: dict[tuple[str, str | None], Any] = {}
_UINT64 = pa.decimal128(20, 0)  # Spark has no unsigned types: uint32 widens to int64, uint64 to decimal(20,0)
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ProtobufDecoder:
    """Decodes Confluent-framed Protobuf into the reader message's Arrow type."""

    registry: RegistrySettings
    subject: str
    schema: str  # the reader schema: a serialized FileDescriptorProto, base64 (the registry's "serialized" form)
    message: str | None  # the reader message's full name; None: the file's first message

    @classmethod
    def resolve(cls, registry: RegistrySettings, subject: str, fmt: RecordFormat) -> ProtobufDecoder:
        s = reader_schema(registry, subject, fmt.schema_id, fmt.version, "PROTOBUF", fmt="serialized")
        decoder = cls(registry, subject, s.schema_str, fmt.message)
        decoder.arrow_type  # noqa: B018 - refuse an unknown message or a recursive one now
        return decoder

    @property
    def arrow_type(self) -> pa.DataType:
        return message_type(_message_class(self.schema, self.message).DESCRIPTOR, ())

    def decode(self, values: pa.Array) -> Decoded:
        from google.protobuf.message import DecodeError

        raw_ids, bad = framing(values, self.registry)
        parse = _message_class(self.schema, self.message).FromString
        rows: list[Any] = []
        for i, (v, raw) in enumerate(zip(values.to_pylist(), raw_ids.to_pylist(), strict=True)):
            if raw is None or i in bad:
                rows.append(None)
                continue
            try:
                rows.append(_row(parse(v[_payload_start(v):])))
            except (DecodeError, IndexError, ValueError) as e:
                bad[i] = Failure("protobuf_invalid", f"{type(e).__name__}: {e}")
                rows.append(None)
        return Decoded(rows_to_array(rows, self.arrow_type, bad, "protobuf_invalid"), bad)


def _message_class(schema: str, message: str | None) -> Any:
    """The message class of the reader schema (one per process and schema)."""
    with _LOCK:
        cls = _CLASSES.get((schema, message))
        if cls is None:
            cls = _CLASSES[(schema, message)] = _build_class(schema, message)
        return cls


def _build_class(schema: str, message: str | None) -> Any:
    from confluent_kafka.schema_registry.common.protobuf import _init_pool
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message_factory import GetMessageClass

    pool = DescriptorPool()
    _init_pool(pool)  # the well-known types a schema may import
    fd = file_descriptor(schema)
    pool.Add(fd)
    file = pool.FindFileByName(fd.name)
    if message is None:
        if not file.message_types_by_name:
            msg = "protobuf: the schema declares no message"
            raise ValueError(msg)
        desc = next(iter(file.message_types_by_name.values()))
    else:
        try:
            desc = pool.FindMessageTypeByName(message)
        except KeyError:
            msg = f"protobuf: the schema has no message {message!r}"
            raise ValueError(msg) from None
    return GetMessageClass(desc)


def file_descriptor(schema: str) -> Any:
    """The FileDescriptorProto of a schema in the registry's serialized form (base64), named ``default``.

    ValueError when it is not one (a registry answering with the ``.proto`` text instead)."""
    import base64
    import binascii

    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    fd = descriptor_pb2.FileDescriptorProto()
    try:
        fd.ParseFromString(base64.b64decode(schema, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        msg = (
            "protobuf: the schema registry did not serve the reader schema as a serialized "
            "FileDescriptorProto (GET /schemas/ids/{id}?format=serialized answers it in base64 "
            f"on Confluent's registry and Karapace); it served {schema[:60]!r}"
        )
        raise ValueError(msg) from None
    fd.name = "default"
    return fd


def _payload_start(value: bytes) -> int:
    """Where the message starts: after the 5-byte header and the message indexes (zigzag varints:
    their count, then each; a lone 0 byte stands for ``[0]``, the first message)."""
    at = 5
    if value[at] == 0:
        return at + 1
    count, at = _varint(value, at)
    for _ in range(count >> 1 ^ -(count & 1)):
        _, at = _varint(value, at)
    return at


def _varint(value: bytes, at: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = value[at]
        out |= (b & 0x7F) << shift
        at += 1
        if not b & 0x80:
            return out, at
        shift += 7


def _scalar_types() -> dict[int, pa.DataType]:
    from google.protobuf.descriptor import FieldDescriptor as F

    return {F.TYPE_DOUBLE: pa.float64(), F.TYPE_FLOAT: pa.float32(), F.TYPE_INT64: pa.int64(),
            F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(), F.TYPE_UINT64: _UINT64,
            F.TYPE_FIXED64: _UINT64, F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(),
            F.TYPE_SFIXED32: pa.int32(), F.TYPE_UINT32: pa.int64(), F.TYPE_FIXED32: pa.int64(),
            F.TYPE_BOOL: pa.bool_(), F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(), F.TYPE_ENUM: pa.string()}


def message_type(desc: Any, seen: tuple[str, ...]) -> pa.DataType:
    """The Arrow struct of a message descriptor (a message that contains itself has no column type)."""
    if desc.full_name in seen:
        msg = f"protobuf: message {desc.full_name} contains itself: no column type"
        raise ValueError(msg)
    return pa.struct([pa.field(f.name, _field_type(f, (*seen, desc.full_name))) for f in desc.fields])


def _field_type(f: Any, seen: tuple[str, ...]) -> pa.DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        key, value = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return pa.map_(_field_type(key, seen), _field_type(value, seen))
    t = message_type(f.message_type, seen) if f.type == F.TYPE_MESSAGE else _scalar_types()[f.type]
    return pa.list_(t) if _repeated(f) else t


def _repeated(f: Any) -> bool:
    if hasattr(f, "is_repeated"):  # protobuf >= 5.29; ``label`` is gone in 7
        return bool(f.is_repeated)
    return bool(f.label == f.LABEL_REPEATED)


def _row(msg: Any) -> dict[str, Any] | None:
    if msg is None:
        return None
    return {f.name: _value(msg, f) for f in msg.DESCRIPTOR.fields}


def _value(msg: Any, f: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    v = getattr(msg, f.name)
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        vf = f.message_type.fields_by_name["value"]
        return [(k, _one(x, vf)) for k, x in v.items()]
    if _repeated(f):
        return [_one(x, f) for x in v]
    if f.has_presence and not msg.HasField(f.name):
        return None
    return _one(v, f) if f.type in (F.TYPE_MESSAGE, F.TYPE_ENUM) else v


def _one(v: Any, f: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if f.type == F.TYPE_MESSAGE:
        return _row(v)
    if f.type == F.TYPE_ENUM:
        named = f.enum_type.values_by_number.get(v)
        return named.name if named is not None else str(v)
    return v
