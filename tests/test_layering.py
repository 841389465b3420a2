"""Layers point one way: ``app`` uses ``spouts`` and ``states``; those two never import ``app``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOWER_LAYERS = ("states", "spouts")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` imports, as absolute names (relative imports resolved against ``package``)."""
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules_of(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_lower_layers_never_import_app(layer: str) -> None:
    """No module under states/ or spouts/ imports app, anywhere in its body (lazy imports included)."""
    assert modules_of(layer), f"no modules found under {layer}/"
    offenders = {}
    for path in modules_of(layer):
        package = ".".join(path.relative_to(ROOT).parts[:-1])
        imported = imported_modules(path.read_text(encoding="utf-8"), package)
        offenders[str(path.relative_to(ROOT))] = sorted(m for m in imported if m == "app" or m.startswith("app."))
    offenders = {p: ms for p, ms in offenders.items() if ms}
    assert not offenders, f"{layer}/ must not import app: {offenders}"


def test_the_check_sees_lazy_and_relative_imports() -> None:
    """The parser catches ``import app.x`` and ``from app import y`` inside functions, and resolves relative imports."""
    source = "def f():\n    import app.metrics\n    from app import demo\nfrom .session import x\n"
    assert imported_modules(source, "states.cassandra") == {
        "app.metrics", "app", "app.demo", "states.cassandra.session", "states.cassandra.session.x"}
