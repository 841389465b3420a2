"""``spark.kafka_reader`` after the JVM read path was removed: Python reads every format. A config that still asks
for the JVM (``jvm``, ``auto``) is refused in one line naming the field; ``python``, the old default, still loads
and is warned about as a line to delete."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client import CollectorRegistry

import app.service.process
import app.spark.session
from app.config import loads, parse
from app.metrics import Metrics
from tests.service.test_config import ROOT, doc, error


@pytest.mark.parametrize("reader", ["jvm", "auto", "JVM"])
def test_a_config_asking_for_the_jvm_read_path_is_refused_naming_the_field(reader: str) -> None:
    e = error(doc(spark={"kafka_reader": reader}))
    assert e.path == "spark.kafka_reader", str(e)
    assert "the JVM read path was removed and Python reads every format" in e.message, str(e)
    assert "\n" not in str(e)


def test_python_is_accepted_and_marked_deprecated() -> None:
    assert parse(doc(spark={"kafka_reader": "python"})).spark.deprecated() == [
        "spark.kafka_reader is deprecated and has no effect (Python reads every format): delete it"]
    assert parse(doc()).spark.deprecated() == []


def _validate(tmp_path: Path, reader: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc(spark={"kafka_reader": reader})))
    return subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_validate_refuses_jvm_in_one_line_and_warns_about_python(tmp_path: Path) -> None:
    """What an upgrading user sees: exit 2 and one line for ``jvm``; for ``python`` a valid plan and a warning."""
    refused = _validate(tmp_path, "jvm")
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "spark.kafka_reader" in lines[0], lines
    assert "JVM read path was removed" in lines[0], lines
    accepted = _validate(tmp_path, "python")
    assert accepted.returncode == 0, accepted.stderr
    assert "warning: spark.kafka_reader is deprecated and has no effect" in accepted.stderr
    assert "kafka_reader" not in json.loads(accepted.stdout)["spark"]


def test_the_service_warns_at_start_up_about_python(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The start-up log says what ``validate`` says, for a config that was never validated (Spark not started)."""
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="local[2]"))  # what the service reads of it
    monkeypatch.setattr(app.spark.session, "spark_session", lambda **kwargs: spark)
    service = app.service.process.Service(loads(yaml.safe_dump(doc(spark={"kafka_reader": "python"}))),
                                  metrics=Metrics(CollectorRegistry()))
    with caplog.at_level(logging.WARNING, logger="app.service"):
        service._start_spark()
    assert "spark.kafka_reader is deprecated and has no effect (Python reads every format): delete it" in caplog.text
