"""No import circles in ``app``, ``spouts`` and ``states``, every import counted (:mod:`tests.import_graph`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests.import_graph import circles, import_graph

#: Circles not broken yet, each with its reason. An entry that is no longer a circle fails the test.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _describe(component: frozenset[str], graph: Mapping[str, set[str]]) -> str:
    edges = sorted(f"{a} -> {b}" for a in component for b in graph[a] if b in component)
    return f"{sorted(component)}: " + ", ".join(edges)


def test_no_import_circles() -> None:
    """No two modules of app, spouts and states need each other, directly or through others."""
    graph = import_graph()
    assert len(graph) > 100, "the walk found too few modules"
    found = circles(graph)
    new = [_describe(c, graph) for c in found if c not in KNOWN_CIRCLES]
    assert not new, "import circles:\n" + "\n".join(new)
    gone = [sorted(c) for c in KNOWN_CIRCLES if c not in found]
    assert not gone, f"no longer circles, drop them from KNOWN_CIRCLES: {gone}"


def test_the_graph_sees_lazy_typing_and_package_imports(tmp_path: Path) -> None:
    """Imports inside functions and under TYPE_CHECKING, relative ones and ``from package import submodule``
    make edges, parent packages included; the circle they close is found and named."""
    files = {
        "app/__init__.py": "",
        "app/pkg/__init__.py": "",
        "app/pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.pkg.b import B\n",
        "app/pkg/b.py": "def f():\n    from . import c\n",
        "app/pkg/c.py": "import app.other.d\n",
        "app/other/__init__.py": "from app.pkg import a\n",
        "app/other/d.py": "",
        "spouts/__init__.py": "",
        "states/__init__.py": "import os\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["app.pkg.a"] == {"app.pkg.b"}
    assert graph["app.pkg.b"] == {"app.pkg.c"}
    assert graph["app.pkg.c"] == {"app.other", "app.other.d"}
    assert graph["app.other"] == {"app.pkg", "app.pkg.a"}
    assert circles(graph) == [frozenset({"app.pkg.a", "app.pkg.b", "app.pkg.c", "app.other"})]
