"""The command line's commands, one module each: ``run``, ``validate``, ``demo``, ``topics``, ``status``,
``query``, ``rewind``, ``audit`` and ``migrate``. Each module has ``add(subparsers)`` (its arguments, ``--help`` with an
example and the exit codes of :mod:`app.commands.common`) and a handler returning the exit code.

The top layer below ``python -m app`` itself: may import every other package of ``app``; nothing but
:mod:`app.__main__` imports it (``app/__init__.py`` lists the layers)."""

from __future__ import annotations

import importlib

COMMANDS = ("run", "validate", "demo", "topics", "status", "query", "rewind", "audit", "migrate")


def modules() -> list[object]:
    return [importlib.import_module(f"app.commands.{name}") for name in COMMANDS]
