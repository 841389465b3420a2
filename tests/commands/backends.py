"""The state backends the command tests run against: SQLite, the CQL test server, and a real Cassandra when set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.states.backends import cassandra_settings

STATE_BACKENDS = ["sqlite", "cassandra", pytest.param("cassandra_real", marks=pytest.mark.real_cassandra)]


def state_section(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], Any]:
    """(the pipeline's ``state:`` section, the CassandraSettings for the config's ``cassandra:`` or None)."""
    if backend == "sqlite":
        return {"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")}, None
    kind = "cqlserver" if backend == "cassandra" else "real"
    return {"backend": "cassandra"}, cassandra_settings(request, kind)
