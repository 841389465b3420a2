"""``spark.kafka_reader``: ``validate`` says which path each pipeline reads Kafka with, and refuses ``jvm`` where
Spark's Kafka source cannot read it (exit 2, without starting Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.service.test_config import ROOT, doc


def _validate(tmp_path: Path, env: dict[str, str] | None = None, **changes: object) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc(**changes)))
    return subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})


def test_validate_names_each_pipelines_read_path(tmp_path: Path) -> None:
    out = _validate(tmp_path)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["spark"]["kafka_reader"] == "python"
    assert plan["pipelines"][0]["reads_with"] == "python (spark.kafka_reader: python)"
    auto = json.loads(_validate(tmp_path, spark__kafka_reader="auto").stdout)
    assert auto["pipelines"][0]["reads_with"].startswith("jvm (Spark's Kafka source), python where the brokers")


def test_jvm_for_a_json_pipeline_is_refused_with_the_reason(tmp_path: Path) -> None:
    out = _validate(tmp_path, spark__kafka_reader="jvm",
                    pipelines__0__spout__value_format={"type": "json", "fields": {"text": "string"}})
    assert out.returncode == 2, out.stderr
    assert "spark.kafka_reader jvm: value_format json decodes in Python" in out.stderr
    auto = json.loads(_validate(tmp_path, spark__kafka_reader="auto",
                                pipelines__0__spout__value_format={"type": "json", "fields": {"text": "string"}}).stdout)
    assert auto["pipelines"][0]["reads_with"] == "python (value_format json decodes in Python)"


def test_jvm_without_the_connector_jars_names_them_and_the_command(tmp_path: Path) -> None:
    empty = tmp_path / "jars"
    empty.mkdir()
    out = _validate(tmp_path, env={"TRIDENT_JARS": str(empty)}, spark__kafka_reader="jvm")
    assert out.returncode == 2, out.stderr
    assert "spark-sql-kafka-0-10_2.13-4.2.0.jar" in out.stderr and "make jars" in out.stderr
    assert "kafka-clients-" in out.stderr
