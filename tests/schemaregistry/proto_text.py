"""The ``.proto`` text a registry answers for a Protobuf schema, as Karapace 3.15 lays it out."""

from __future__ import annotations

import base64
from typing import Any


def proto_text(serialized: str) -> str:
    """The ``.proto`` text of a schema in the serialized form (a base64 FileDescriptorProto), laid out as
    Karapace does: syntax, package, imports, messages (fields, oneofs, nested messages and enums), enums.
    Options are left out; a schema registered as text is returned as it is."""
    from google.protobuf import descriptor_pb2

    try:
        raw = base64.b64decode(serialized, validate=True)
    except ValueError:
        return serialized
    fd = descriptor_pb2.FileDescriptorProto.FromString(raw)
    lines = [f'syntax = "{fd.syntax or "proto2"}";']
    if fd.package:
        lines.append(f"package {fd.package};")
    lines += [f'import "{d}";' for d in fd.dependency]
    lines.append("")
    for m in fd.message_type:
        lines += _message_lines(m, fd.syntax)
    for e in fd.enum_type:
        lines += _enum_lines(e)
    return "\n".join(lines) + "\n"


def _message_lines(m: Any, syntax: str) -> list[str]:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    scalars = {v: k[len("TYPE_"):].lower() for k, v in F.Type.items() if v not in (F.TYPE_MESSAGE, F.TYPE_ENUM,
                                                                                   F.TYPE_GROUP)}

    def line(f: Any) -> str:
        label = "repeated " if f.label == F.LABEL_REPEATED else "required " if f.label == F.LABEL_REQUIRED else \
            "optional " if syntax != "proto3" or f.proto3_optional else ""
        return f"{label}{scalars.get(f.type) or f.type_name} {f.name} = {f.number};"

    plain = [f for f in m.field if not f.HasField("oneof_index") or f.proto3_optional]
    body = [f"  {line(f)}" for f in plain]
    for i, oneof in enumerate(m.oneof_decl):
        members = [f for f in m.field if f.HasField("oneof_index") and f.oneof_index == i and not f.proto3_optional]
        if members:
            body += ["", f"  oneof {oneof.name} {{", *(f"    {line(f)}" for f in members), "  }"]
    nested = [x for n in m.nested_type for x in _message_lines(n, syntax)] + \
        [x for e in m.enum_type for x in _enum_lines(e)]
    if nested:
        body += ["", *(f"  {x}" for x in nested)]
    return [f"message {m.name} {{", *body, "}"]


def _enum_lines(e: Any) -> list[str]:
    return [f"enum {e.name} {{", *(f"  {v.name} = {v.number};" for v in e.value), "}"]
