"""One module reads the environment: ``app/config`` (STYLE.md, habit 9); every other product module is handed values."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("app", "states", "spouts")
READER = ROOT / "app" / "config"


def environment_reads(source: str) -> list[int]:
    """Lines that read ``os.environ`` (a lookup, ``get``, a membership test, iteration) or call ``os.getenv``;
    setting a variable for a child process is no read."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                isinstance(node.value, ast.Name) and node.value.id == "os":
            lines.append(node.lineno)  # noqa: PERF401  a loop reads clearer here
    writes = {n.lineno for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Subscript)
              and isinstance(n.ctx, ast.Store)}
    return sorted(line for line in lines if line not in writes)


#: Reads across a process boundary the config cannot cross, each with its reason.
CROSSINGS = {
    # Spark's Python workers are forked by PySpark's daemon, a process Spark starts with the driver's environment:
    # the driver's log level reaches them only that way (app.logs.configure sets it), and importing app.config in
    # the daemon would cost every worker start half a second.
    "app/logs.py": 1,
}


def test_only_app_config_reads_the_environment() -> None:
    found = {str(p.relative_to(ROOT)): environment_reads(p.read_text(encoding="utf-8"))
             for layer in PRODUCT for p in sorted((ROOT / layer).rglob("*.py")) if READER not in p.parents}
    assert not {p: lines for p, lines in found.items() if lines and len(lines) != CROSSINGS.get(p)}
    assert all(len(found[p]) == n for p, n in CROSSINGS.items()), "a crossing no longer read: drop it"


def test_the_check_sees_reads_and_lets_writes_pass() -> None:
    source = ("import os\nA = os.environ.get('USER')\nB = os.getenv('HOME')\nos.environ['X'] = 'y'\n"
              "C = 'Z' in os.environ\n")
    assert environment_reads(source) == [2, 3, 5]
