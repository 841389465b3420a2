"""The field reference of ``docs/configuration.md``, generated from the config models.

Each table of fields in the guide sits between ``<!-- fields: NAME -->`` and ``<!-- end fields -->``
and is written from the model's fields: name, default, accepted values (from the JSON Schema: choices,
bounds, types) and the ``Field(description=...)``. ``make docs`` (``python -m app.config.reference``)
rewrites them, and the JSON Schema exports; tests fail when any of them is stale.
"""

from __future__ import annotations

import argparse
import enum
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from app.config.schema.cassandra import CassandraModel, TlsModel
from app.config.schema.document import Document
from app.config.schema.kafka import KafkaModel, RegistryModel, TopicModel
from app.config.schema.pipeline import CapsModel, PipelineModel, SpoutModel, StateModel
from app.config.schema.service import AuditModel, HttpModel, ServiceModel
from app.config.schema.spark import SparkModel

#: The tables of the guide: marker name -> the model whose fields it lists.
TABLES: dict[str, type[BaseModel]] = {
    "kafka": KafkaModel, "schema_registry": RegistryModel, "cassandra": CassandraModel, "spark": SparkModel,
    "http": HttpModel, "service": ServiceModel, "audit": AuditModel, "pipelines": PipelineModel, "spout": SpoutModel,
    "state": StateModel, "topics": TopicModel,
}
#: Small sections listed in their parent's table as ``parent.field`` rows.
FLATTENED = (TlsModel, CapsModel)

_BLOCK = re.compile(r"(<!-- fields: (\w+) -->\n)(.*?)(<!-- end fields -->)", re.DOTALL)
_BOUND_NAMES = {"ge": ">=", "minimum": ">=", "gt": ">", "exclusiveMinimum": ">", "le": "<=", "maximum": "<=",
                "lt": "<", "exclusiveMaximum": "<"}


def table(model: type[BaseModel]) -> str:
    """The markdown table of ``model``'s fields."""
    defs = Document.model_json_schema(by_alias=True)["$defs"]
    rows = ["| Field | Default | Values | Meaning |", "|---|---|---|---|"]
    rows += _rows(model, defs[model.__name__], defs, "")
    return "\n".join(rows) + "\n"


def _rows(model: type[BaseModel], schema: dict[str, Any], defs: dict[str, Any], prefix: str) -> list[str]:
    out = []
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    for name, prop in schema["properties"].items():
        info = fields[name]
        ref = _ref(prop)
        nested = info.annotation if isinstance(info.annotation, type) else None
        if nested in FLATTENED:
            out += _rows(nested, defs[nested.__name__], defs, f"{prefix}{name}.")
            continue
        default = "required" if info.is_required() else _default(info.get_default(call_default_factory=True))
        meaning = info.description or (defs[ref].get("description", "") if ref else "")
        out.append(f"| `{prefix}{name}` | {default} | {_values(prop, defs)} | {_cell(meaning)} |")
    return out


def _ref(prop: dict[str, Any]) -> str | None:
    for p in (prop, *prop.get("anyOf", ())):
        if "$ref" in p:
            return str(p["$ref"]).rsplit("/", 1)[1]
    return None


def _default(value: Any) -> str:  # noqa: PLR0911  one return per kind of value reads best
    if isinstance(value, BaseModel):
        return ""  # a section: its fields have their own defaults
    if isinstance(value, enum.Enum):
        value = value.value
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}`" if value else "`{}`"
    if isinstance(value, list):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    return f"`{value}`"


def _values(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    options = [p for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    shown = " or ".join(_one(p, defs) for p in options)
    return shown + (" or `null`" if len(options) < len(prop.get("anyOf", [prop])) else "")


def _one(p: dict[str, Any], defs: dict[str, Any]) -> str:  # noqa: PLR0911  one return per JSON Schema type
    if "enum" in p:
        return ", ".join(f"`{v}`" for v in p["enum"])
    if "$ref" in p:
        return "a mapping"
    kind = p.get("type")
    if kind in ("integer", "number"):
        low = next((f"{v:g}" for k, v in p.items() if k in ("ge", "minimum")), None)
        high = next((f"{v:g}" for k, v in p.items() if k in ("le", "maximum")), None)
        if low is not None and high is not None:
            return f"{kind} {low}-{high}"
        return " ".join([kind, *(f"{_BOUND_NAMES[k]} {v:g}" for k, v in p.items() if k in _BOUND_NAMES)])
    if kind == "array":
        items = p.get("items", {})
        return f"list of {_one(items, defs)}s" if items.get("type") in ("string", "integer") else "list"
    if kind == "object":
        return "mapping"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind or "any")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def refresh(text: str) -> str:
    """``text`` (the guide) with every marked table written anew from the models."""
    def fill(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in TABLES:
            msg = f"no table {name!r} (one of {', '.join(TABLES)})"
            raise KeyError(msg)
        return m.group(1) + table(TABLES[name]) + m.group(4)
    return _BLOCK.sub(fill, text)


def write_all(root: Path) -> list[Path]:
    """Write what is generated from the models under ``root`` (a checkout); returns the files that changed.

    The guide's field tables, ``docs/config.schema.json`` (the JSON Schema) and the ``config`` property of
    the Helm chart's ``values.schema.json`` (the schema with references inlined).
    """
    from app.config.schema.document import chart_schema, json_schema

    guide, export = root / "docs" / "configuration.md", root / "docs" / "config.schema.json"
    chart_file = root / "helm" / "trident-stream" / "values.schema.json"
    chart = json.loads(chart_file.read_text(encoding="utf-8"))
    chart["properties"]["config"] = chart_schema()
    fresh = {guide: refresh(guide.read_text(encoding="utf-8")),
             export: json.dumps(json_schema(), indent=2, sort_keys=True) + "\n",
             chart_file: json.dumps(chart, indent=2) + "\n"}
    changed = [path for path, text in fresh.items() if path.read_text(encoding="utf-8") != text]
    for path in changed:
        path.write_text(fresh[path], encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the guide's field tables, docs/config.schema.json and the "
                                                 "chart's values.schema.json from the config models")
    parser.add_argument("--root", type=Path, default=Path(), help="the checkout (default: the current directory)")
    args = parser.parse_args(argv)
    for path in write_all(args.root):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
