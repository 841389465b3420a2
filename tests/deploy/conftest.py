"""Fixtures of the deployment tests: the Debian tools (``prometheus``, ``promtool``) they run for real."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(name: str) -> str:
    """The path of ``name``; in CI a missing tool fails the test (tests/deploy/install_tools.sh installs it)."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} not found: run tests/deploy/install_tools.sh (Debian package prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return require_tool("promtool")


@pytest.fixture(scope="session")
def prometheus() -> str:
    return require_tool("prometheus")
