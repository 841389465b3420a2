"""The state backends the command tests run against: SQLite, and Cassandra (the real one when set, else the CQL
test server)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.states.backends import behaviour_kind, cassandra_settings

#: ``cassandra``: ``cassandra.shards`` unset, so the table gets the default layout (16 shards);
#: ``cassandra-per-key``: ``shards: 0``, a partition per key; every command reads both. ``cassandra-sharded``
#: (4 shards, a count other than the default) is for the tests that name it.
STATE_BACKENDS = ["sqlite", "cassandra", "cassandra-per-key"]
SHARDS = {"cassandra": None, "cassandra-per-key": 0, "cassandra-sharded": 4}


def state_section(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[dict[str, Any], Any]:
    """(the pipeline's ``state:`` section, the CassandraSettings for the config's ``cassandra:`` or None)."""
    if backend == "sqlite":
        return {"backend": "sqlite", "sqlite_path": str(tmp_path / "state.db")}, None
    settings = cassandra_settings(request, behaviour_kind(request))
    return {"backend": "cassandra"}, replace(settings, shards=SHARDS[backend])
