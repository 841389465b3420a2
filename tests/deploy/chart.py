"""The chart under test, through Helm's own Go SDK (``helm-python-sdk``): render, lint, schema-check.

:func:`render` returns the manifests as parsed documents, each with the template it came from;
:data:`KUBE_VERSION` is the Kubernetes version the manifests are linted and validated against.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "trident-stream"
SCENARIOS = Path(__file__).with_name("scenarios")
KUBE_VERSION = "1.35.0"  # a recent release kubernetes-validate ships strict schemas for
RELEASE, NAMESPACE = "demo", "streams"


@dataclass(frozen=True, slots=True)
class Manifest:
    """One rendered Kubernetes object and the template that produced it."""

    template: str
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])


def scenario_values(name: str) -> dict[str, Any]:
    return yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text()) or {}


def scenario_names() -> list[str]:
    return sorted(p.stem for p in SCENARIOS.glob("*.yaml"))


def render_raw(values: dict[str, Any]) -> dict[str, str]:
    """Template path -> rendered text, as ``helm install --dry-run`` would produce it (schema checked)."""
    with helm.Chart.load(CHART) as chart:
        return chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: dict[str, Any]) -> list[Manifest]:
    """Every Kubernetes object the chart renders with ``values`` (NOTES.txt left out)."""
    out: list[Manifest] = []
    for template, text in sorted(render_raw(values).items()):
        if template.endswith("NOTES.txt"):
            continue
        out.extend(Manifest(template, doc) for doc in yaml.safe_load_all(text) if doc)
    return out


def notes(values: dict[str, Any]) -> str:
    return next(text for template, text in render_raw(values).items() if template.endswith("NOTES.txt"))


def lint(values: dict[str, Any]) -> dict[str, Any]:
    """``helm lint --strict`` of the chart with ``values`` against :data:`KUBE_VERSION`."""
    return helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}")


def validate_schema(values: dict[str, Any]) -> None:
    """Helm's own check of ``values`` (merged over the defaults) against values.schema.json."""
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)


def one(manifests: list[Manifest], kind: str, name_suffix: str = "") -> dict[str, Any]:
    """The single object of ``kind`` (whose name ends with ``name_suffix``)."""
    found = [m.doc for m in manifests if m.kind == kind and m.name.endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} *{name_suffix}, got {[m.name for m in manifests if m.kind == kind]}"
    return found[0]
