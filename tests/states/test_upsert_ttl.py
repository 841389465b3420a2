"""Per-table TTL: every write of a key (LWT inserts and updates included) sets its row to expire.

Checked with CQL's own ``TTL(col)`` on the CQL test server and, when configured, a real Cassandra.
Backends that cannot expire rows refuse a TTL when the table is opened.
"""

from __future__ import annotations

import pytest

from states.aggregators import Latest, combine_updater
from states.factory import StateFactory
from states.opaque import OpaqueMap
from states.spec import Column, MapSpec, StateKind
from states.sqlite import SqliteBackingMap
from states.stamped import Stamped
from tests.states.backends import cassandra_peer, cassandra_settings

TTL_S = 3600
SPEC = MapSpec("ttl_upserts", StateKind.OPAQUE, (Column("id", "text"),),
               (Column("amount", "bigint", stamped=True),), ttl_s=TTL_S)


def _write(state: OpaqueMap, txid: int, offset: int, amount: int) -> None:
    state.begin_commit(txid)
    state.multi_update(["a"], [combine_updater(Latest(), Stamped(1_000, 0, offset, amount))])
    state.commit(txid)


def _ttls(session: object, keyspace: str) -> tuple[int, int, int]:
    row = session.execute(f"SELECT TTL(amount), TTL(txid), TTL(amount_at) FROM {keyspace}.ttl_upserts "  # type: ignore[attr-defined]
                          "WHERE id = 'a'").one()
    return tuple(row.values())  # the shared session returns dict rows


@pytest.mark.parametrize("kind", ["cqlserver", "real"])
def test_every_write_sets_the_ttl(request: pytest.FixtureRequest, kind: str) -> None:
    """The first LWT insert and every LWT update leave TTL(col) just under ttl_s on each stored column;
    on the test server (whose clock moves) an update restarts the clock and an idle key expires."""
    from states.cassandra import CassandraBackingMap
    from states.cassandra.session import shared_client

    settings = cassandra_settings(request, kind, shards=0)  # a sharded table's TTLs: test_sharded_ttl.py
    peer = cassandra_peer(request, kind)
    backing = CassandraBackingMap(settings, SPEC)
    state = OpaqueMap(backing)
    session = shared_client(settings).session
    _write(state, 1, 1, 5)  # INSERT ... IF NOT EXISTS USING TTL
    assert all(TTL_S - 60 <= t <= TTL_S for t in _ttls(session, settings.keyspace))
    if peer.server is not None:
        peer.server.advance_clock(1000)
        assert all(t <= TTL_S - 1000 for t in _ttls(session, settings.keyspace))
    _write(state, 2, 2, 6)  # UPDATE ... USING TTL ... IF
    assert all(TTL_S - 60 <= t <= TTL_S for t in _ttls(session, settings.keyspace))
    assert backing.multi_get(["a"])[0].curr == Stamped(1_000, 0, 2, 6)
    if peer.server is not None:
        peer.server.advance_clock(TTL_S + 1)
        assert backing.multi_get(["a"]) == [None]


def test_sqlite_refuses_a_ttl(tmp_path: object) -> None:
    """SQLite rows never expire: a table with ttl_s is refused when opened, not silently kept."""
    with pytest.raises(ValueError, match="ttl_s needs the cassandra backend"):
        SqliteBackingMap(f"{tmp_path}/s.db", SPEC)


def test_memory_refuses_a_ttl() -> None:
    with pytest.raises(ValueError, match="ttl_s needs the cassandra backend"):
        StateFactory(backend="memory").backing_map(SPEC)
