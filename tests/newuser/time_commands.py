"""How long the commands that should answer at once take: ``python -m tests.newuser.time_commands [CONFIG]``.

A measurement, not a test (a loaded machine makes any timing fail at random): each command runs
``--runs`` times as a user types it, and its median wall time and whether it imported PySpark are
printed. Goals on a quiet machine: ``--help`` under 1 s, ``validate`` under 3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (("--help",), ("validate", "--config", "{config}"), ("status", "--config", "{config}"),
            ("query", "--config", "{config}", "--pipeline", "{pipeline}", "--top", "3"))
#: ``python -m app ARGS`` as a script, telling on stderr's last line whether PySpark was imported.
PROBE = """
import runpy, sys
sys.argv = ["app", *sys.argv[1:]]
code = 0
try:
    runpy.run_module("app", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
print("pyspark" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def timed(args: list[str], root: Path) -> tuple[float, int, bool]:
    """Seconds, exit code and whether PySpark was imported, for ``python -m app ARGS`` (code from ``root``)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    return time.perf_counter() - began, done.returncode, done.stderr.strip().endswith("True")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", nargs="?", default=str(ROOT / "examples" / "local.yaml"))
    p.add_argument("--pipeline", default="word-count-local")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--root", default=str(ROOT), help="the checkout whose code runs (to compare two)")
    a = p.parse_args()
    for command in COMMANDS:
        args = [part.format(config=a.config, pipeline=a.pipeline) for part in command]
        runs = [timed(args, Path(a.root)) for _ in range(a.runs)]
        print(f"{' '.join(command[:1]):10} median {statistics.median(r[0] for r in runs):5.2f} s  "
              f"(min {min(r[0] for r in runs):.2f}, exit {runs[-1][1]}, pyspark imported: {runs[-1][2]})")


if __name__ == "__main__":
    main()
