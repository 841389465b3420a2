"""The config's JSON Schema: exported from the models, kept in sync in docs/ and in the Helm chart, and right."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
import yaml

from app.commands.validate import schema_text
from app.config import json_schema, parse
from app.config.schema.document import chart_schema
from tests.service.test_config import EXAMPLES, ROOT, doc

CHART_SCHEMA = ROOT / "helm" / "trident-stream" / "values.schema.json"
DOCS_SCHEMA = ROOT / "docs" / "config.schema.json"
REGENERATE = "make docs"


def validator() -> jsonschema.Draft202012Validator:
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_docs_copy_is_the_export() -> None:
    """docs/config.schema.json is what the models export (regenerate it after changing them)."""
    assert DOCS_SCHEMA.read_text() == schema_text(), f"docs/config.schema.json is stale: run {REGENERATE}"


def test_the_command_prints_it() -> None:
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--schema"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == json_schema()


def test_the_chart_validates_config_with_the_export() -> None:
    """The chart's ``config`` property is the export with references inlined, and still a valid schema."""
    chart = json.loads(CHART_SCHEMA.read_text())
    assert chart["properties"]["config"] == chart_schema(), "values.schema.json's config is stale: run make docs"
    jsonschema.Draft7Validator.check_schema(chart)
    assert "$ref" not in json.dumps(chart["properties"]["config"])


@pytest.mark.parametrize("path", [*EXAMPLES, ROOT / "helm" / "trident-stream" / "values.yaml"], ids=lambda p: p.name)
def test_shipped_configs_satisfy_the_schema(path: Any) -> None:
    d = yaml.safe_load(path.read_text())
    d = d["config"] if path.name == "values.yaml" else d
    assert [e.message for e in validator().iter_errors(d)] == []


@pytest.mark.parametrize(("changes", "where"), [
    ({"pipelines__0__state__tabel": "x"}, ["pipelines", 0, "state"]),
    ({"pipelines__0__max_pending": "two"}, ["pipelines", 0, "max_pending"]),
    ({"cassandra": {"port": 99999}}, ["cassandra", "port"]),
    ({"pipelines__0__aggregates": [{"count": {}, "sum": {"field": "x"}}]}, ["pipelines", 0, "aggregates", 0]),
    ({"pipelines__0__spout__kind": "exact"}, ["pipelines", 0, "spout", "kind"]),
])
def test_the_schema_refuses_what_parse_refuses(changes: dict[str, Any], where: list[Any]) -> None:
    """An editor flags the same field the service would refuse (or the optional section holding it)."""
    errors = list(validator().iter_errors(doc(**changes)))
    paths = [list(e.absolute_path) for e in errors]
    assert any(p and where[:len(p)] == p for p in paths), [e.message for e in errors]


def test_variables_are_allowed_where_numbers_and_booleans_go() -> None:
    """``${VAR}`` in a number or boolean field is valid for the schema, and parse converts it."""
    d = doc(pipelines__0__max_pending="${PENDING:-3}", pipelines__0__accept_at_least_once="${ALO:-false}",
            cassandra={"port": "${PORT}"})
    assert list(validator().iter_errors(d)) == []
    assert parse(d, {"PORT": "9042"}).pipelines[0].max_pending == 3
