"""Layers point one way: ``app`` uses ``spouts`` and ``states``, which never import ``app``; inside ``app``
each package imports only itself and the layers below it (the order ``app/__init__.py`` writes down)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.import_graph import ROOT, import_graph, modules_of

LOWER_LAYERS = ("states", "spouts")

#: ``app``'s layers, top to bottom: a module imports its own package and those of the layers below its
#: own, never one of its layer (the packages of a layer are peers) or above. Kept as ``app/__init__.py`` says.
APP_LAYERS: tuple[tuple[str, ...], ...] = (
    ("app.__main__",),
    ("app.commands",),
    ("app.service", "app.demo"),
    ("app.audit",),
    ("app.config",),
    ("app.coordinator", "app.query"),
    ("app.spark",),
    ("app.topology",),
    ("app.bad_records",),
    ("app.metrics", "app.logs", "app.kafka_offsets", "app.migrations"),
    ("app.failures",),
)


def home(module: str, layers: Sequence[Sequence[str]] = APP_LAYERS) -> tuple[int, str] | None:
    """The layer (its index, top 0) and the package of ``module``; None for ``app`` itself and outside it."""
    for rank, packages in enumerate(layers):
        for package in packages:
            if module == package or module.startswith(f"{package}."):
                return rank, package
    return None


def upward_imports(graph: Mapping[str, set[str]], layers: Sequence[Sequence[str]] = APP_LAYERS) -> list[str]:
    """Every edge from an ``app`` module to another package of its own layer or of one above it."""
    found = []
    for module, targets in sorted(graph.items()):
        here = home(module, layers)
        if here is None:
            continue
        for target in sorted(targets):
            there = home(target, layers)
            if there is not None and there[1] != here[1] and there[0] <= here[0]:
                found.append(f"{module} -> {target}")
    return found


@pytest.mark.parametrize("layer", LOWER_LAYERS)
def test_lower_layers_never_import_app(layer: str) -> None:
    """No module under states/ or spouts/ imports app, anywhere in its body (lazy imports included)."""
    graph = import_graph()
    modules = [m for m in graph if m.split(".")[0] == layer]
    assert modules, f"no modules found under {layer}/"
    offenders = {m: sorted(t for t in graph[m] if t.split(".")[0] == "app") for m in modules}
    offenders = {m: ts for m, ts in offenders.items() if ts}
    assert not offenders, f"{layer}/ must not import app: {offenders}"


def test_every_app_module_has_a_layer() -> None:
    """A new module or package directly in app/ is given its place in the layers (here and in app/__init__.py)."""
    homeless = sorted(m for m in modules_of(ROOT, ("app",)) if m != "app" and home(m) is None)
    assert not homeless, f"modules of app in no layer: {homeless}"


def test_app_imports_point_down_the_layers() -> None:
    """No import in app (at the top, in a function or for typing) runs up its layers or across to a peer."""
    upward = upward_imports(import_graph())
    assert not upward, "imports up the layers of app:\n" + "\n".join(upward)


def test_the_check_sees_lazy_typing_and_relative_imports(tmp_path: Path) -> None:
    """A lazy, a typing-only and a relative import up the layers each fail the check; imports down do not,
    nor does ``from app import x`` inside ``app``'s own package."""
    files = {
        "app/__init__.py": "",
        "app/top/__init__.py": "",
        "app/top/a.py": "import app.low.b\nfrom app.mid import c\n",
        "app/mid/__init__.py": "",
        "app/mid/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.top.a import A\n",
        "app/low/__init__.py": "",
        "app/low/b.py": "def f():\n    from ..mid import c\n",
        "app/low/d.py": "from . import b\n",
        "spouts/__init__.py": "",
        "states/__init__.py": "def f():\n    from app import low\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    layers = (("app.top",), ("app.mid",), ("app.low",))
    assert upward_imports(graph, layers) == ["app.low.b -> app.mid", "app.low.b -> app.mid.c",
                                             "app.mid.c -> app.top", "app.mid.c -> app.top.a"]
    assert graph["states"] == {"app", "app.low"}
