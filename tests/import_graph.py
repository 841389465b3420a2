"""The import graph of ``app``, ``spouts`` and ``states``, read from their source: what the layering and
import-circle tests check.

Every import counts wherever it stands: at the top of a module, inside a function (a lazy import is
still a file that needs another), and under ``if TYPE_CHECKING:`` (an annotation naming another
module's type is a dependency on that module; not counting it would leave the easiest place to hide
a circle or an upward import). Importing ``a.b.c`` also runs the packages ``a`` and ``a.b``, so those
are edges too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("app", "spouts", "states")


def modules_of(root: Path, layers: tuple[str, ...] = LAYERS) -> dict[str, Path]:
    """Every module under ``layers``, by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for layer in layers:
        for path in (root / layer).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(source: str, module: str, is_package: bool, known: Mapping[str, object]) -> set[str]:
    """The known modules ``source`` imports anywhere in its body: ``from x import y`` is ``x.y`` when that is a
    module, else ``x``; relative imports are resolved; each imported module's parent packages are included."""
    package = module if is_package else module.rpartition(".")[0]
    direct: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            direct.update(_known_prefix(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                direct.add(sub if sub in known else _known_prefix(base, known))
    found: set[str] = set()
    for name in direct - {""}:
        parts = name.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    # The packages the module itself sits in have run before it: an edge to them is no dependency.
    own = module.split(".")
    found -= {".".join(own[:i]) for i in range(1, len(own) + 1)}
    return {m for m in found if m in known}


def _known_prefix(name: str, known: Mapping[str, object]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = modules_of(root)
    return {name: imports_of(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", modules)
            for name, path in modules.items()}


def circles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found
