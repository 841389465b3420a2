"""``python -m app demo``, the README's first command: its exit code and what it prints."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from app.demo.spark import report
from tests.service.helpers import ROOT


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_counts_every_word_exactly_once_and_exits_zero() -> None:
    """The Spark demo on an in-process Kafka stores exactly the produced counts, says so, reports records/s, exits 0."""
    out = subprocess.run([sys.executable, "-m", "app", "demo", "--records", "5000", "--master", "local[2]"],
                         cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "produced 5000 sentences" in out.stdout
    assert "committed txid 1:" in out.stdout
    assert "records/s" in out.stdout
    assert "every key matches what was produced: exactly once" in out.stdout
    assert "MISMATCH" not in out.stdout


def test_demo_memory_variant_still_runs() -> None:
    """``demo --memory`` keeps the in-memory demo (no Spark, no Kafka) reachable."""
    out = subprocess.run([sys.executable, "-m", "app", "demo", "--memory", "--records", "2000"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all counts match" in out.stdout


def test_a_mismatch_is_reported_and_exits_one(capsys: pytest.CaptureFixture[str]) -> None:
    """When a stored count differs from what was produced the demo names the key and returns 1."""
    truth = Counter({"the": 3, "fox": 1})
    assert report({"the": 3, "fox": 1}, truth, {"records": 2, "seconds": 1.0, "txids": 1, "startup": 1.0}) == 0
    assert report({"the": 4, "fox": 1}, truth, {"records": 2, "seconds": 1.0, "txids": 1, "startup": 1.0}) == 1
    assert "MISMATCH on 1 keys: the stored 4 expected 3" in capsys.readouterr().out
