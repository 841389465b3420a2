"""Running ``python -m app`` as a user would, for the start-up tests: the real servers from the environment."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from tests.peers import REAL_CASSANDRA, REAL_KAFKA, cassandra_from_env, missing_peer

ROOT = Path(__file__).resolve().parents[2]


def real_kafka() -> str:
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not servers:
        missing_peer(REAL_KAFKA, "KAFKA_BOOTSTRAP_SERVERS is not set")
    return servers


def real_cassandra() -> tuple[str, int]:
    found = cassandra_from_env()
    if found is None:
        missing_peer(REAL_CASSANDRA, "CASSANDRA_CONTACT_POINTS is not set")
    return found[0][0], found[1]


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def app(*args: str, timeout: float = 300, cwd: Path = ROOT, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``python -m app ARGS``, its output as text; this worktree's code first on the path."""
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout)


def lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]
