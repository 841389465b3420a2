"""Each start-up problem is one line, with its exit code, before Spark starts (no traceback).

Servers "down" are a closed local port, never the shared servers stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.newuser.startup import app, closed_port, lines_with, real_cassandra, real_kafka, unique
from tests.service.helpers import free_port, word_count_config

SPARK = "starting Spark"


def _config(tmp_path: Path, *, state: dict[str, Any], cassandra: dict[str, Any] | None = None,
            outage_limit_s: float | None = None) -> Path:
    path = word_count_config(tmp_path / "c.yaml", bootstrap=real_kafka(), topic=unique("startup"), port=free_port(),
                             state=state, cassandra=cassandra)
    if outage_limit_s is not None:
        import yaml

        doc = yaml.safe_load(path.read_text())
        doc["pipelines"][0]["outage_limit_s"] = outage_limit_s
        path.write_text(yaml.safe_dump(doc))
    return path


def _one_line_before_spark(r: Any, code: int, *needles: str) -> str:
    out = r.stdout + r.stderr
    assert r.returncode == code, out
    assert "Traceback" not in out, out
    assert SPARK not in out, out
    failed = lines_with(out, "start-up failed")
    assert len(failed) == 1, out
    for n in needles:
        assert n in failed[0], failed[0]
    return failed[0]


def test_cassandra_away_is_waited_for_then_exit_1_before_spark(tmp_path: Path) -> None:
    port = closed_port()
    config = _config(tmp_path, state={"backend": "cassandra", "table": "wc"},
                     cassandra={"contact_points": ["127.0.0.1"], "port": port, "connect_timeout_s": 1},
                     outage_limit_s=4)
    r = app("run", "--config", str(config), timeout=120)
    _one_line_before_spark(r, 1, f"127.0.0.1:{port}", "outage_limit_s")
    waits = lines_with(r.stderr, "does not answer")
    assert len(waits) >= 2, r.stderr
    assert all("WARNING" in w for w in waits), r.stderr
    assert lines_with(r.stderr, "cassandra.") == [], r.stderr  # the driver's own lines of each attempt: not shown


def test_wrong_local_dc_is_named_with_the_clusters_data_centres(tmp_path: Path) -> None:
    host, port = real_cassandra()
    config = _config(tmp_path, state={"backend": "cassandra", "table": "wc"},
                     cassandra={"contact_points": [host], "port": port, "local_dc": "dc1",
                                "keyspace": unique("ks")})
    r = app("run", "--config", str(config), timeout=120)
    _one_line_before_spark(r, 2, "cassandra.local_dc", "'dc1'", "datacenter1")


def test_status_names_a_wrong_local_dc(tmp_path: Path) -> None:
    host, port = real_cassandra()
    config = _config(tmp_path, state={"backend": "cassandra", "table": "wc"},
                     cassandra={"contact_points": [host], "port": port, "local_dc": "dc1",
                                "keyspace": unique("ks")})
    r = app("status", "--config", str(config), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "cassandra.local_dc" in r.stderr, r.stderr
    assert "datacenter1" in r.stderr, r.stderr


def test_missing_keyspace_without_create_keyspace_is_exit_2(tmp_path: Path) -> None:
    host, port = real_cassandra()
    keyspace = unique("absent")
    config = _config(tmp_path, state={"backend": "cassandra", "table": "wc"},
                     cassandra={"contact_points": [host], "port": port, "keyspace": keyspace,
                                "create_keyspace": False})
    r = app("run", "--config", str(config), timeout=120)
    _one_line_before_spark(r, 2, "cassandra.keyspace", keyspace, "create_keyspace")


def test_sqlite_path_under_a_file_is_refused_by_validate_and_run(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a directory")
    config = _config(tmp_path, state={"backend": "sqlite", "sqlite_path": str(tmp_path / "plain" / "x.db")})
    v = app("validate", "--config", str(config), timeout=120)
    assert v.returncode == 2, v.stderr
    assert "sqlite_path" in v.stderr, v.stderr
    assert "Traceback" not in v.stderr, v.stderr
    r = app("run", "--config", str(config), timeout=120)
    _one_line_before_spark(r, 2, "sqlite_path", "plain")


@pytest.mark.parametrize("name", ["data/ok.db", "fresh/dir/ok.db"])
def test_a_creatable_sqlite_path_passes(tmp_path: Path, name: str) -> None:
    from app.service.access import sqlite_path_problem

    assert sqlite_path_problem(str(tmp_path / name)) is None
    assert sqlite_path_problem(str(tmp_path)) is not None  # a directory


def test_sigterm_while_waiting_for_cassandra_exits_0_without_spark(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.newuser.startup import ROOT

    config = _config(tmp_path, state={"backend": "cassandra", "table": "wc"},
                     cassandra={"contact_points": ["127.0.0.1"], "port": closed_port(), "connect_timeout_s": 1})
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--config", str(config)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "does not answer" in line or SPARK in line:
                break
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rest, _ = proc.communicate(timeout=60)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out
    assert time.monotonic() - t0 < 10, out
    assert SPARK not in out, out
    assert "Traceback" not in out, out
