"""The README's "Running the service" commands, run as shown, top to bottom, on real servers.

What is substituted, and only that: the servers' addresses come from ``KAFKA_BOOTSTRAP_SERVERS`` and
``CASSANDRA_CONTACT_POINTS`` (as the README says to export elsewhere); the example config is copied with
``cassandra.port`` set to ``CASSANDRA_PORT`` (as the README says to edit) and a unique topic, keyspace and
HTTP port, so runs on a shared cluster do not meet. The
stored counts must equal the words the README's producer line wrote.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.newuser.startup import ROOT, real_cassandra, real_kafka, unique
from tests.service.helpers import free_port

pytestmark = pytest.mark.slow
EXAMPLE = "examples/wordcount-local.yaml"


def readme_commands() -> list[str]:
    """Every command line of the README's "Running the service" section, trailing comments cut."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Running the service\n", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for line in block.splitlines():
            if line.startswith(".venv/bin/python"):
                out.append(re.sub(r"\s{2,}#.*$", "", line))  # noqa: PERF401  a loop reads clearer here
    return out


def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    real_kafka()
    _, cassandra_port = real_cassandra()
    topic, keyspace, port = unique("readme"), unique("readme"), free_port()
    config = tmp_path / "wordcount-local.yaml"
    text = (ROOT / EXAMPLE).read_text()
    text = text.replace("sentences", topic).replace("trident_local", keyspace).replace("9400", str(port))
    text = text.replace("port: 9042", f"port: {cassandra_port}")
    config.write_text(text)
    commands = readme_commands()
    assert [c.split()[3] for c in commands if " -m app " in c] == \
        ["validate", "topics", "run", "topics", "status", "query", "rewind"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    produced: Counter[str] = Counter()
    for line in commands:
        line = line.replace(EXAMPLE, str(config))  # noqa: PLW2901  the line normalized in place
        if " -c " in line:
            line = line.replace("'sentences'", f"'{topic}'")  # noqa: PLW2901  the line normalized in place
            sentences = re.findall(r"'([a-z ]+)'", line.split("for s in", 1)[1])
            produced.update(w for s in sentences for w in s.split())
        if " run " in line:
            _run_until_committed(line, env, sum(produced.values()))
            continue
        r = subprocess.run(line, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{line}\n{r.stdout}\n{r.stderr}"
        if " query " in line:
            header, *rows = [row.split() for row in r.stdout.splitlines() if row.strip()]
            word, count = header.index("word"), header.index("count")
            stored = {c[word]: int(c[count]) for c in rows if c[count].isdigit()}
            assert stored == dict(produced.most_common(10)) or stored == dict(produced), r.stdout
    assert produced, "the README's producer line wrote nothing"


def _run_until_committed(line: str, env: dict[str, str], words: int) -> None:
    """``run`` as shown, until it logs a commit of every produced word; then SIGTERM, exit 0."""
    proc = subprocess.Popen(f"exec {line}", shell=True, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + 400
    try:
        assert proc.stdout is not None
        for out in proc.stdout:
            lines.append(out)
            m = re.search(r"committed txid \d+: (\d+) records", out)
            if m and int(m.group(1)) > 0:
                break
            assert time.monotonic() < deadline, "".join(lines)
        proc.send_signal(signal.SIGTERM)  # to the service alone, as an orchestrator sends it
        rest, _ = proc.communicate(timeout=120)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, "".join(lines)
    assert "Traceback" not in "".join(lines), "".join(lines)
    assert words > 0
