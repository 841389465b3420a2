"""``--help`` answers at once: building the command line imports neither Spark nor the config models nor Arrow.

(How fast is a benchmark, not a test: on a quiet machine ``--help`` takes about 0.2 s, ``validate`` under 2 s.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
    assert err.count("\n") == 1, err
    assert "RuntimeError: something no check foresaw" in err, err
    assert "--debug" in err, err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "validate", "--config", "x.yaml"])


COMMAND_PROBE = """
import json, sys
from app.__main__ import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "pyspark": "pyspark" in sys.modules}))
"""


@pytest.mark.parametrize("command", [["validate"], ["status"], ["query", "--pipeline", "wc", "--top", "3"]])
def test_validate_status_and_query_run_without_importing_pyspark(command: list[str], tmp_path: Path) -> None:
    """The commands that answer at once need no Spark (it took seconds to import): ``query`` read a table's
    layout through ``app.spark.plan``, whose package imported the Spark executor."""
    from tests.newuser.startup import closed_port

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": f"127.0.0.1:{closed_port()}", "request_timeout_s": 1},
        "pipelines": [{"id": "wc", "spout": {"topics": ["words"]},
                       "transforms": [{"map": ["CAST(value AS STRING) AS word"]}], "group_by": ["word"],
                       "aggregates": [{"count": {"as": "n"}}],
                       "state": {"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db"), "table": "t"}}]}))
    r = subprocess.run([sys.executable, "-c", COMMAND_PROBE, command[0], "--config", str(config), *command[1:]],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert r.stdout.strip(), r.stderr
    done = json.loads(r.stdout.strip().splitlines()[-1])
    assert "Traceback" not in r.stderr, r.stderr
    assert done["pyspark"] is False, (done, r.stderr)
