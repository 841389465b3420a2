"""What a config says about a record's key or value: its format and, for JSON, its declared fields.

``bytes`` (the default) keeps the raw bytes; ``string`` decodes UTF-8; ``json`` parses an object
into the declared fields and types; ``avro``, ``protobuf`` and ``json_schema`` read the Confluent
wire format (magic byte 0, a 4-byte schema id, the payload) through a Schema Registry, resolved to
one schema fixed at start-up (``schema_id``, ``version`` or the subject's latest).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


class FormatType(enum.StrEnum):
    BYTES = "bytes"
    STRING = "string"
    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"

    @property
    def registry(self) -> bool:
        """Whether records carry a Schema Registry id (Confluent wire format)."""
        return self in (FormatType.AVRO, FormatType.PROTOBUF, FormatType.JSON_SCHEMA)


#: Declared JSON field types and their Arrow types (Spark SQL's names; ``long`` = ``bigint``).
FIELD_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def field_type(name: str) -> pa.DataType:
    """The Arrow type of a declared JSON field type (``bigint``, ``decimal(10,2)``...); ValueError if unknown."""
    t = name.strip().lower()
    if t in FIELD_TYPES:
        return FIELD_TYPES[t]
    m = _DECIMAL.fullmatch(t)
    if m and 0 < int(m.group(1)) <= 38 and int(m.group(2)) <= int(m.group(1)):
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    msg = f"unknown field type {name!r} (one of {', '.join(FIELD_TYPES)}, decimal(p,s))"
    raise ValueError(msg)


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """The format of a record's key or value.

    ``fields``: for ``json``, ``(name, type)`` pairs in order (at least one). ``subject``: for the
    registry formats, the subject whose schema the records are read as (default ``<topic>-key`` /
    ``<topic>-value``, Confluent's topic name strategy; required when a spout reads several
    topics). ``schema_id`` / ``version`` pin the reader schema; neither: the subject's latest at
    start-up. ``message``: for ``protobuf``, the message's full name when the schema has several.
    """

    type: FormatType = FormatType.BYTES
    fields: tuple[tuple[str, str], ...] = ()
    subject: str | None = None
    version: int | None = None
    schema_id: int | None = None
    message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", FormatType(self.type))
        object.__setattr__(self, "fields", tuple((str(n), str(t)) for n, t in self.fields))
        if self.type is FormatType.JSON:
            self._check_json_fields()
        elif self.fields:
            msg = f"fields are declared for format json only, not {self.type.value}"
            raise ValueError(msg)
        if not self.type.registry and (self.subject, self.version, self.schema_id) != (None, None, None):
            msg = f"subject, version and schema_id belong to a registry format, not {self.type.value}"
            raise ValueError(msg)
        if self.version is not None and self.schema_id is not None:
            msg = "set at most one of version and schema_id"
            raise ValueError(msg)
        if self.message is not None and self.type is not FormatType.PROTOBUF:
            msg = "message belongs to format protobuf"
            raise ValueError(msg)

    def _check_json_fields(self) -> None:
        """Format json declares its fields: names of letters, digits and '_', each once, of known types."""
        if not self.fields:
            msg = "format json needs fields: {name: type, ...} (the typed columns it produces)"
            raise ValueError(msg)
        names = [n for n, _ in self.fields]
        for n, t in self.fields:
            if not _FIELD_NAME.match(n):
                msg = f"json field {n!r}: a field name is letters, digits and '_'"
                raise ValueError(msg)
            if names.count(n) > 1:
                msg = f"json field {n!r} is declared twice"
                raise ValueError(msg)
            try:
                field_type(t)
            except ValueError as e:
                msg = f"json field {n!r}: {e}"
                raise ValueError(msg) from None

    @classmethod
    def of(cls, spec: str | dict[str, Any] | RecordFormat | None) -> RecordFormat:
        """From a format name (``"string"``), a mapping (``{"type": "json", "fields": {...}}``) or a RecordFormat."""
        if spec is None:
            return cls()
        if isinstance(spec, RecordFormat):
            return spec
        if isinstance(spec, str):
            return cls(FormatType(spec))
        d = dict(spec)
        fields = d.pop("fields", None) or {}
        return cls(fields=tuple(fields.items()) if isinstance(fields, dict) else tuple(fields), **d)

    def subject_for(self, topics: tuple[str, ...], part: str) -> str:
        """The registry subject to read ``part`` (``key``/``value``) as: configured, else ``<topic>-<part>``."""
        if self.subject:
            return self.subject
        if len(topics) != 1:
            raise ValueError(f"{part}_format {self.type.value}: set subject (the spout reads {len(topics) or 'a pattern of'} "
                             "topics, so <topic>-" + part + " names no single subject)")
        return f"{topics[0]}-{part}"

    def describe(self) -> dict[str, Any]:
        """A plain description (``validate`` prints it)."""
        out: dict[str, Any] = {"type": self.type.value}
        if self.fields:
            out["fields"] = dict(self.fields)
        for k in ("subject", "version", "schema_id", "message"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


BYTES = RecordFormat()


@dataclass(frozen=True, slots=True)
class Failure:
    """Why one key or value did not decode: a stable reason and a message for people."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Decoded:
    """A decoded column: ``array`` is as long as the input, null at bad positions; ``bad`` maps index -> Failure."""

    array: pa.Array
    bad: dict[int, Failure] = field(default_factory=dict)
