"""The command line: every command's --help has an example and the exit codes; the dispatcher only dispatches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.commands import COMMANDS
from tests.commands.helpers import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [[c] for c in COMMANDS if c != "topics"] + [["topics", "plan"], ["topics", "apply"]])
def test_help_shows_an_example_and_the_exit_codes(argv: list[str]) -> None:
    r = cli(*argv, "--help")
    assert r.code == 0
    assert f"example:\n  python -m app {' '.join(argv)}" in r.out
    for code in ("0  done", "1  failed", "2  bad config", "3  refused", "4  partly done"):
        assert code in r.out


def test_bad_arguments_exit_2_naming_them(tmp_path: Path) -> None:
    r = cli("query", "--config", "x.yaml")
    assert r.code == 2 and "--pipeline" in r.err
    r = cli("validate", "--config", str(tmp_path / "missing.yaml"))
    assert r.code == 2 and "cannot read config file" in r.err


def test_python_m_app_dispatches_in_a_fresh_process() -> None:
    out = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    assert all(c in out.stdout for c in COMMANDS)
