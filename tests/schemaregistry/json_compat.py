"""The JSON Schema compatibility checks of the registry test peer: the part of Karapace's and
Confluent's rules that decides the evolutions tests make, each checked against Karapace 3.15.

``problems(reader, writer)`` says why a document valid under ``writer`` may not be under ``reader``
(empty: it is). Checked: types (an ``integer`` writer read as ``number`` is a widening), objects
(a property added to an open content model, that is one without ``additionalProperties: false``,
restricts what it accepted; one removed from a closed reader; a model closed; a property newly
required), array items, properties and items recursively through local ``$ref``. Anything else
(``anyOf``/``oneOf``, ``enum``, bounds, ``patternProperties``, remote refs) is NOT checked: declared
compatible, so the peer refuses only what real registries refuse.
"""

from __future__ import annotations

from typing import Any


def problems(reader: Any, writer: Any) -> list[str]:
    """Why documents ``writer`` accepts may be refused by ``reader`` (both whole JSON Schema documents)."""
    return _node(reader, writer, reader, writer, "#")


def _node(r: Any, w: Any, r_root: Any, w_root: Any, path: str) -> list[str]:
    r, w = _resolved(r, r_root), _resolved(w, w_root)
    if not isinstance(r, dict) or not isinstance(w, dict):
        return []
    r_types, w_types = _types(r), _types(w)
    if r_types is not None and w_types is not None:
        lost = sorted(t for t in w_types - r_types if not (t == "integer" and "number" in r_types))
        if lost:
            return [f"{path}: the writer's {lost} values are not of the reader's types {sorted(r_types)}"]
    out: list[str] = []
    if "properties" in r or "properties" in w:
        out += _object(r, w, r_root, w_root, path)
    if isinstance(r.get("items"), dict) and isinstance(w.get("items"), dict):
        out += _node(r["items"], w["items"], r_root, w_root, f"{path}/items")
    return out


def _object(r: dict[str, Any], w: dict[str, Any], r_root: Any, w_root: Any, path: str) -> list[str]:
    r_props, w_props = r.get("properties", {}), w.get("properties", {})
    r_open, w_open = r.get("additionalProperties", True) is not False, w.get("additionalProperties", True) is not False
    out = [f"{path}: property {name!r} added to an open content model" for name, schema in r_props.items()
           if name not in w_props and w_open and schema not in ({}, True)]
    out += [f"{path}: property {name!r} removed from a closed content model" for name in w_props
            if name not in r_props and not r_open]
    if w_open and not r_open:
        out.append(f"{path}: additionalProperties false introduced")
    out += [f"{path}: property {name!r} newly required" for name in r.get("required", [])
            if name not in w.get("required", [])]
    for name in r_props.keys() & w_props.keys():
        out += _node(r_props[name], w_props[name], r_root, w_root, f"{path}/properties/{name}")
    return out


def _resolved(node: Any, root: Any) -> Any:
    """``node`` with its local ``$ref`` followed (a remote one left as it is: not checked)."""
    seen = 0
    while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
        seen += 1
        if seen > 32:
            return None  # a cycle of references: not checked
        target = root
        for part in node["$ref"][2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        node = target
    return node


def _types(node: dict[str, Any]) -> set[str] | None:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return None
