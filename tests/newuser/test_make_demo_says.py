"""``make demo`` says what it installs before each long silent step (read from ``make -n``, nothing runs)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.newuser.startup import ROOT


def test_make_demo_names_each_install_step_before_it_runs() -> None:
    if shutil.which("make") is None:
        pytest.fail("make is not installed")
    r = subprocess.run(["make", "-n", "-B", "demo", "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    install = next(i for i, line in enumerate(lines) if "pip install" in line and "-e" in line)
    said = [line for line in lines[:install] if line.startswith("echo")]
    assert any("installing trident-stream" in line for line in said), r.stdout
    assert "--quiet" not in lines[install], lines[install]  # pip names each package it collects
