"""The real Cassandra runs the Paxos variant the run asked for, so a lane meant for Paxos v2 never passes on v1.

``CASSANDRA_PAXOS_VARIANT`` is what the servers were started with (the compatibility lane sets ``v2``); unset,
the server must run the default protocol (``v1`` on 5.0; 4.0 has only that one and no such setting).
"""

from __future__ import annotations

import os

import pytest

from tests.states.backends import cassandra_peer


def test_the_server_runs_the_paxos_variant_of_the_run(request: pytest.FixtureRequest) -> None:
    """The server's own ``paxos_variant`` setting equals the one asked for (v1, the default, when none was)."""
    from states.cassandra.session import shared_client

    settings = cassandra_peer(request, "real").settings("system_views")
    session = shared_client(settings).session
    version = session.execute("SELECT release_version FROM system.local").one()["release_version"]
    wanted = os.environ.get("CASSANDRA_PAXOS_VARIANT", "v1")
    if tuple(int(n) for n in version.split(".")[:2]) < (4, 1):
        assert wanted == "v1", f"Cassandra {version} has Paxos v1 only; this run asked for {wanted}"
        return
    rows = list(session.execute("SELECT value FROM system_views.settings WHERE name = 'paxos_variant'"))
    assert [r["value"] for r in rows] == [wanted], f"Cassandra {version}: paxos_variant {rows}, asked for {wanted}"
