"""The state backends the command tests run against: SQLite, and Cassandra (the real one when set, else the CQL
test server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.states.backends import behaviour_kind, cassandra_settings

#: ``cassandra-sharded``: a Cassandra table with its keys in 4 shards (``cassandra.shards``): every command reads it.
STATE_BACKENDS = ["sqlite", "cassandra", "cassandra-sharded"]


def state_section(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], Any]:
    """(the pipeline's ``state:`` section, the CassandraSettings for the config's ``cassandra:`` or None)."""
    if backend == "sqlite":
        return {"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")}, None
    settings = cassandra_settings(request, behaviour_kind(request))
    return {"backend": "cassandra"}, replace(settings, shards=4) if backend == "cassandra-sharded" else settings
