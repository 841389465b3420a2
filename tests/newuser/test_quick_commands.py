"""``--help`` answers at once: building the command line imports neither Spark nor the config models nor Arrow.

(How fast is a benchmark, not a test: on a quiet machine ``--help`` takes about 0.2 s, ``validate`` under 2 s.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.newuser.startup import ROOT

HEAVY = ("pyspark", "app.config", "pandas", "pyarrow", "sqlglot", "pydantic", "cassandra", "spouts.kafka")

PROBE = """
import argparse, json, sys
from app.commands import modules
parser = argparse.ArgumentParser()
sub = parser.add_subparsers()
for m in modules():
    m.add(sub)
print(json.dumps(sorted(sys.modules)))
"""


def test_the_command_line_is_built_without_heavy_imports() -> None:
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    loaded = [m for m in json.loads(r.stdout) if m.split(".")[0] in {h.split(".")[0] for h in HEAVY}
              and any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == [], loaded



def _broken(args: object) -> int:
    raise RuntimeError("something no check foresaw")


def test_an_unexpected_error_is_one_line_and_its_traceback_only_with_debug(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from app import __main__ as cli
    from app.commands import validate

    monkeypatch.setattr(validate, "main", _broken)
    assert cli.main(["validate", "--config", "x.yaml"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "RuntimeError: something no check foresaw" in err and "--debug" in err, err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "validate", "--config", "x.yaml"])
