"""The alert rules: ``promtool check rules`` on the rule file and on the rendered PrometheusRule, and
``promtool test rules`` with a firing case for every alert."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.deploy.chart import CHART, one, render, scenario_values

RULES = CHART / "rules" / "trident-stream.rules.yaml"
UNIT_TESTS = Path(__file__).with_name("rules_test.yaml")


def promtool_run(promtool: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def alert_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def test_rule_file_passes_promtool_check(promtool: str) -> None:
    """``promtool check rules`` accepts the rule file with every alert in it."""
    result = promtool_run(promtool, "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout


def test_rendered_prometheus_rule_passes_promtool_check(promtool: str, tmp_path: Path) -> None:
    """The PrometheusRule the chart renders holds a valid rule file (what the operator hands to Prometheus)."""
    rule = one(render(scenario_values("monitoring")), "PrometheusRule")
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = promtool_run(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_unit_test() -> None:
    """Each alert of the rule file appears in rules_test.yaml with a case where it fires."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    firing = {case["alertname"] for t in tests for case in t.get("alert_rule_test", []) if case.get("exp_alerts")}
    assert set(alert_names()) == {"TridentNoCommitWhileLagging", "TridentLagGrowing", "TridentNoActiveCoordinator",
                                  "TridentDataLoss", "TridentUnknownOutcomes", "TridentPipelineFailing",
                                  "TridentPipelineStopped", "TridentPipelineDegraded"}
    assert firing == set(alert_names())


def test_alert_unit_tests_pass(promtool: str) -> None:
    """``promtool test rules``: every alert fires on its bad series, with its labels and annotations, and not on healthy ones."""
    result = promtool_run(promtool, "test", "rules", UNIT_TESTS.name, cwd=UNIT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_can_fail(promtool: str, tmp_path: Path) -> None:
    """A wrong expectation makes ``promtool test rules`` fail (so the passing run above means something)."""
    doc = yaml.safe_load(UNIT_TESTS.read_text())
    doc["rule_files"] = [str(RULES)]
    doc["tests"][0]["alert_rule_test"][1]["exp_alerts"][0]["exp_labels"]["pipeline"] = "healthy"
    broken = tmp_path / "broken_test.yaml"
    broken.write_text(yaml.safe_dump(doc))
    result = promtool_run(promtool, "test", "rules", str(broken))
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr
