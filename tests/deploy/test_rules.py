"""The alert rules: ``promtool check rules`` on the rule file and on the rendered PrometheusRule,
``promtool test rules`` with a firing and a silent case for every alert, runbook links that resolve
to a section of docs/operations.md, and a chart README that lists exactly the alerts and metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from tests.deploy.chart import CHART, NAMESPACE, ROOT, one, render, scenario_values

RULES = CHART / "rules" / "trident-stream.rules.yaml"
UNIT_TESTS = Path(__file__).with_name("rules_test.yaml")
OPERATIONS = ROOT / "docs" / "operations.md"
DEFAULT_RUNBOOK = "https://example.invalid/trident-stream/docs/operations.md"


def promtool_run(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def rendered_spec(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec for release ``demo`` in namespace ``streams``."""
    return dict(one(render(values or scenario_values("monitoring")), "PrometheusRule")["spec"])


def rules_of(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in spec["groups"] for r in g["rules"] if "alert" in r]


def unit_test_dir(tmp_path: Path, unit_tests: dict[str, Any] | None = None) -> Path:
    """rules_test.yaml (or ``unit_tests``) next to the rendered rules it names, in ``tmp_path``."""
    (tmp_path / "rendered.rules.yaml").write_text(yaml.safe_dump(rendered_spec()))
    if unit_tests is None:
        shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    else:
        (tmp_path / UNIT_TESTS.name).write_text(yaml.safe_dump(unit_tests))
    return tmp_path


def test_rule_file_passes_promtool_check(promtool: str) -> None:
    """``promtool check rules`` accepts the plain rule file with every alert in it."""
    result = promtool_run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules_of(yaml.safe_load(RULES.read_text())))} rules found" in result.stdout


def test_rendered_prometheus_rule_passes_promtool_check(promtool: str, tmp_path: Path) -> None:
    """The PrometheusRule the chart renders holds a valid rule file (what the operator hands to Prometheus)."""
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump(rendered_spec()))
    result = promtool_run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 17 rules found" in result.stdout


def test_rendered_rules_are_the_file_plus_the_release_group() -> None:
    """The file's group ships as is; the release's group names this release's job, namespace and pods."""
    spec = rendered_spec()
    assert spec["groups"][0] == yaml.safe_load(RULES.read_text())["groups"][0]
    release = {r["alert"]: r for r in spec["groups"][1]["rules"]}
    assert set(release) == {"TridentDown", "TridentRestarting"}
    assert release["TridentDown"]["expr"] == 'absent(up{namespace="streams", job="demo-trident-stream"} == 1)'
    assert release["TridentDown"]["labels"] == {"severity": "critical", "namespace": NAMESPACE,
                                                "job": "demo-trident-stream"}
    assert 'pod=~"demo-trident-stream-.*"' in release["TridentRestarting"]["expr"]
    custom = rendered_spec(scenario_values("monitoring") | {"metrics": {
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "job": "streams/words", "runbookBaseUrl": "https://wiki.example/ops",
                           "restartsPerHour": 5}}})
    urls = [r["annotations"]["runbook_url"] for r in rules_of(custom)]
    assert urls
    assert all(u.startswith("https://wiki.example/ops#") for u in urls)
    down = next(r for r in rules_of(custom) if r["alert"] == "TridentDown")
    assert 'job="streams/words"' in down["expr"]
    assert next(r for r in rules_of(custom) if r["alert"] == "TridentRestarting")["expr"].strip().endswith(">= 5")


def test_every_alert_has_a_firing_and_a_silent_unit_test() -> None:
    """Each alert the chart renders appears in rules_test.yaml with a case where it fires and one where it does not."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    cases = [case for t in tests for case in t.get("alert_rule_test", [])]
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    names = {r["alert"] for r in rules_of(rendered_spec())}
    assert names == {"TridentNoCommitWhileLagging", "TridentLagGrowing", "TridentLagSecondsHigh",
                     "TridentNoActiveCoordinator", "TridentInstanceDown", "TridentDataLoss", "TridentBadRecords",
                     "TridentUnknownOutcomes", "TridentPipelineFailing", "TridentPipelineStopped",
                     "TridentPipelineDegraded", "TridentSparkExecutorsGone", "TridentAuditDifference",
                     "TridentPartitionLarge", "TridentPartitionTooLarge", "TridentDown",
                     "TridentRestarting"}
    assert firing == names
    assert silent == names


def test_alert_unit_tests_pass(promtool: str, tmp_path: Path) -> None:
    """``promtool test rules`` on the rendered rules: every alert fires on its bad series, with its labels and
    annotations (runbook link included), and not on healthy ones; a release that never started and an
    outage of two hours alert."""
    result = promtool_run(promtool, "test", "rules", UNIT_TESTS.name, cwd=unit_test_dir(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_can_fail(promtool: str, tmp_path: Path) -> None:
    """A wrong expectation makes ``promtool test rules`` fail (so the passing run above means something)."""
    doc = yaml.safe_load(UNIT_TESTS.read_text())
    doc["tests"][0]["alert_rule_test"][1]["exp_alerts"][0]["exp_labels"]["pipeline"] = "healthy"
    result = promtool_run(promtool, "test", "rules", UNIT_TESTS.name, cwd=unit_test_dir(tmp_path, doc))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def _slug(heading: str) -> str:
    """A Markdown heading's anchor as GitHub and most renderers make it."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_a_runbook_section() -> None:
    """Each alert's runbook_url is the default base plus the anchor of a heading in docs/operations.md."""
    anchors = {_slug(line.lstrip("#")) for line in OPERATIONS.read_text().splitlines() if line.startswith("#")}
    for rule in rules_of(rendered_spec()):
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == DEFAULT_RUNBOOK, rule["alert"]
        assert anchor == rule["alert"].lower(), rule["alert"]
        assert anchor in anchors, f"docs/operations.md has no section #{anchor}"


def _readme_table(first_cell: str) -> dict[str, list[str]]:
    """The rows of the chart README's table whose header starts with ``first_cell``, by their first cell."""
    rows: dict[str, list[str]] = {}
    inside = False
    for line in (CHART / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            inside = True
        elif not line.startswith("|"):
            inside = False
        elif inside and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells
    return rows


def test_readme_lists_exactly_the_alerts() -> None:
    alerts = _readme_table("Alert")
    assert set(alerts) == {r["alert"] for r in rules_of(rendered_spec())}
    severities = {r["alert"]: r["labels"]["severity"] for r in rules_of(rendered_spec())}
    assert {name: cells[1] for name, cells in alerts.items()} == severities


def test_readme_lists_exactly_the_metrics() -> None:
    """The Metrics table names every family the service exports, with its type and labels."""
    exported = {f"{family.name}_total" if family.type == "counter" else family.name: family.type
                for family in Metrics(CollectorRegistry()).registry.collect()}
    documented = _readme_table("Metric")
    assert set(documented) == set(exported)
    assert {name: cells[1] for name, cells in documented.items()} == exported
    labels = _labels_by_metric()
    for name, cells in documented.items():
        named = set(re.findall(r"`([a-z_]+)`", cells[2]))
        assert named == labels[name] - {"pipeline"}, name


def _labels_by_metric() -> dict[str, set[str]]:
    """Exported name -> label names, from the metric objects of the service and of its layers."""
    m = Metrics(CollectorRegistry())
    out = {}
    for holder in (m, m.states, m.spouts):
        for attr in vars(holder).values():
            names, name = getattr(attr, "_labelnames", None), getattr(attr, "_name", None)
            if names is not None and name is not None:
                out[f"{name}_total" if getattr(attr, "_type", None) == "counter" else name] = set(names)
    return out


def test_release_group_is_unique_per_release() -> None:
    """Two releases in one Prometheus load two groups: the group name carries namespace and release."""
    assert rendered_spec()["groups"][1]["name"] == "trident-stream-release-streams-demo-trident-stream"
