"""JSON Schema through a Schema Registry: Confluent-framed JSON read into the reader schema's columns.

The reader schema (fixed at start-up) gives the Arrow type. The framing (magic byte 0, schema id)
is checked with Arrow compute over the whole batch, each distinct schema id asked of the registry
once, and the payloads parsed by Arrow's JSON reader as for ``json`` (:mod:`.json_fields`): no
Python object per record. A field that does not fit its column is a bad record (``json_type``);
the payload is not validated against the writer's schema again (its producer's serializer did),
so properties the reader schema does not name are ignored and absent ones are null.

Types: object with properties → struct (an object without properties, a map, is refused), array → list, string → string (``format: date-time`` → timestamp), integer → int64, number →
float64, boolean → boolean; ``["T", "null"]`` and ``anyOf``/``oneOf`` of T and null → nullable T;
local ``$ref`` (``#/definitions/...``, ``#/$defs/...``) resolved. Other unions are refused at start-up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from spouts.kafka.formats.json_fields import JsonObjects, scatter
from spouts.kafka.formats.registry import RegistrySettings, framing, reader_schema
from spouts.kafka.formats.spec import Decoded, RecordFormat

_SCALARS = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}


@dataclass(frozen=True, slots=True)
class JsonSchemaDecoder:
    """Decodes Confluent-framed JSON into the reader JSON Schema's Arrow type."""

    registry: RegistrySettings
    subject: str
    schema: str  # the reader schema (JSON Schema text)

    @classmethod
    def resolve(cls, registry: RegistrySettings, subject: str, fmt: RecordFormat) -> JsonSchemaDecoder:
        s = reader_schema(registry, subject, fmt.schema_id, fmt.version, "JSON")
        decoder = cls(registry, subject, s.schema_str)
        decoder.arrow_type  # noqa: B018 - refuse a schema Spark cannot hold now
        return decoder

    @property
    def arrow_type(self) -> pa.StructType:
        root = json.loads(self.schema)
        t = json_schema_type(root, root)
        if not pa.types.is_struct(t):
            msg = "json_schema: the reader schema must describe an object (with properties)"
            raise ValueError(msg)
        return t

    def decode(self, values: pa.Array) -> Decoded:
        _, bad = framing(values, self.registry)
        keep = pc.is_valid(values)
        if bad:
            keep = pc.and_(keep, pa.array([i not in bad for i in range(len(values))]))
        framed = values.filter(keep)  # each at least 5 bytes long
        decoded = JsonObjects(self.arrow_type).decode(pc.binary_slice(framed, 5, (1 << 31) - 1) if len(framed) else framed)
        positions = pc.indices_nonzero(keep).to_pylist()
        bad.update({positions[j]: failure for j, failure in decoded.bad.items()})
        return Decoded(scatter(decoded.array, keep), bad)


def json_schema_type(node: Any, root: Any) -> pa.DataType:
    """The Arrow type of a JSON Schema node (``root``: the document its local $refs point into)."""
    if not isinstance(node, dict):
        msg = f"json_schema: {node!r} is not a schema"
        raise ValueError(msg)  # noqa: TRY004  a schema is refused with ValueError, as every other schema fault
    if "$ref" in node:
        return json_schema_type(_referred(node["$ref"], root), root)
    for union in ("anyOf", "oneOf"):
        if union in node:
            return json_schema_type(_one_option(union, node[union]), root)
    kind = _one_kind(node.get("type"))
    if kind == "object" or (kind is None and "properties" in node):
        if "properties" in node:
            return pa.struct([pa.field(name, json_schema_type(p, root)) for name, p in node["properties"].items()])
        msg = "json_schema: an object without properties (a map) has no column type here"
        raise ValueError(msg)
    if kind == "array":
        return pa.list_(json_schema_type(node.get("items", {}), root))
    if kind == "string" and node.get("format") == "date-time":
        return pa.timestamp("us", tz="UTC")
    if kind in _SCALARS:
        return _SCALARS[kind]
    msg = f"json_schema: type {kind!r} has no column type"
    raise ValueError(msg)


def _referred(ref: str, root: Any) -> Any:
    """The node a local ``$ref`` points to in ``root``."""
    if not ref.startswith("#/"):
        msg = f"json_schema: only local $ref are read, not {ref!r}"
        raise ValueError(msg)
    target = root
    for part in ref[2:].split("/"):
        target = target[part]
    return target


def _one_option(union: str, options: list[Any]) -> Any:
    """The one option of an ``anyOf``/``oneOf`` besides null."""
    kept = [o for o in options if o.get("type") != "null"]
    if len(kept) != 1:
        msg = f"json_schema: {union} of several types has no column type"
        raise ValueError(msg)
    return kept[0]


def _one_kind(kind: Any) -> Any:
    """The one ``type`` besides null of a list of types (a single type as it is)."""
    if not isinstance(kind, list):
        return kind
    kinds = [k for k in kind if k != "null"]
    if len(kinds) != 1:
        msg = f"json_schema: a value of types {kinds} has no column type"
        raise ValueError(msg)
    return kinds[0]
