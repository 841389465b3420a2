"""The native protocol version a client speaks: v4 unless the settings name one.

v5 frames every request in checksummed segments that the Python driver builds in Python, a third of
its CPU per LWT; the commit path therefore speaks v4 (every Cassandra since 2.2 does) unless told.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings
from states.cassandra.session import shared_client
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue
from tests.cqlserver import CqlServer
from tests.states.backends import behaviour_kind, cassandra_settings

pytestmark = pytest.mark.timeout(60)

WORDS = MapSpec("words", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


def _version(server: CqlServer, named: int | None) -> int:
    client = CassandraClient(CassandraSettings(contact_points=(server.host,), port=server.port,
                                               local_dc=server.data_center, protocol_version=named))
    try:
        return int(client.cluster.protocol_version)
    finally:
        client.close()


def test_an_unnamed_version_is_v4_on_a_server_that_speaks_v5() -> None:
    """A server offering v4 and v5 gets v4 by default, and the version named in the settings when one is."""
    with CqlServer() as server:
        assert server.protocol_versions == (4, 5)
        assert _version(server, None) == 4
        assert _version(server, 5) == 5


def test_the_default_version_commits_on_every_peer(request: pytest.FixtureRequest) -> None:
    """The session of default settings speaks v4 (or the version the run names) and its LWTs answer."""
    settings = cassandra_settings(request, behaviour_kind(request))
    client = shared_client(settings)
    assert client.cluster.protocol_version == (settings.protocol_version or 4)
    backing = CassandraBackingMap(settings, WORDS, client=client, metrics=StateMetrics(CollectorRegistry()))
    first = backing.multi_cas([("a",)], [None], [OpaqueValue(1, 1)])
    again = backing.multi_cas([("a",)], [None], [OpaqueValue(1, 2)])
    assert [r.applied for r in first + again] == [True, False]
    assert again[0].current == OpaqueValue(1, 1)


def test_the_small_commit_benchmark_compares_v4_with_v5() -> None:
    """``python -m tests.bench commit --small``: each row's ratio to the best raw run of its repetition, for the
    product and the bare window at each window size over v4, and both over v5 at a window of 64."""
    from tests.bench.commit_path import main

    ratios = main(["--small", "60", "--windows", "8,64", "--repeat", "1"])
    assert set(ratios) == {f"60 {what} v{version} window {window}" for what in ("product", "raw")
                           for version, window in ((4, 8), (4, 64), (5, 64))}
    assert all(0 < r[0] <= 1.0 for name, r in ratios.items() if "raw" in name)
    assert max(r[0] for name, r in ratios.items() if "raw" in name) == 1.0
    assert all(r[0] > 0 for r in ratios.values())
