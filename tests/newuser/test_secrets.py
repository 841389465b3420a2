"""Every missing secret of a config is named in one message, not one per run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.config import ConfigError, load

ROOT = Path(__file__).resolve().parents[2]
SECURED = ROOT / "examples" / "wordcount.yaml"


def test_both_missing_secrets_are_named_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        load(SECURED, env={})
    assert "TRIDENT_KAFKA_SASL_PASSWORD" in str(e.value)
    assert "TRIDENT_CASSANDRA_PASSWORD" in str(e.value)


def test_one_missing_secret_is_still_named() -> None:
    with pytest.raises(ConfigError) as e:
        load(SECURED, env={"TRIDENT_KAFKA_SASL_PASSWORD": "x"})
    assert "TRIDENT_CASSANDRA_PASSWORD" in str(e.value)


def test_validate_names_both_in_one_line_exit_2() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(SECURED)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "TRIDENT_KAFKA_SASL_PASSWORD" in lines[0]
    assert "TRIDENT_CASSANDRA_PASSWORD" in lines[0]
