"""``ttl_s`` on a sharded table: expired keys read as absent everywhere, and start over when written again.

On the CQL test server the server's clock moves past the TTL; on a real Cassandra the TTL is 2 s and the test
waits. Every read path is checked past expiry: a key (``query``), the top N (``query --top``), the full scans
(the audit's ``scan_rows``, ``scan_keys``); then a commit through a warm cache (which still holds the expired
values) is compared with a ground truth computed from the batches. A table with ``ttl_s`` is created with the
options that let Cassandra purge its expired rows (``states.cassandra.schema.EXPIRING_OPTIONS``).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap
from states.cassandra.reader import CassandraTableReader
from states.cassandra.scan import scan_keys, scan_rows
from states.cassandra.schema import EXPIRING_GC_GRACE_S
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.states.backends import cassandra_peer, cassandra_settings

pytestmark = pytest.mark.timeout(120)

SHARDS = 3
FIRST = {"the": 3, "cat": 1, "sat": 1, "on": 2, "a": 1}
SECOND = {"the": 2, "mat": 4, "a": 3}


def spec(ttl_s: int | None) -> MapSpec:
    return MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),),
                   ttl_s=ttl_s)


def commit(state: OpaqueMap, txid: int, batch: dict[str, int]) -> None:
    state.begin_commit(txid)
    state.multi_update([(w,) for w in batch], [combine_updater(Count(), n) for n in batch.values()])
    state.commit(txid)


@pytest.mark.parametrize("kind", ["cqlserver", "real"])
def test_expired_keys_of_a_sharded_table_are_absent_to_every_read_and_start_over(request: pytest.FixtureRequest,
                                                                                 kind: str) -> None:
    """Past the TTL every key is gone from a key read, the top N and the full scans; the next commit, whose cache
    still holds the expired values (its conditional batches fail on rows that are gone), counts each key afresh:
    the table holds exactly the second batch's counts."""
    ttl_s = 3600 if kind == "cqlserver" else 2
    settings = cassandra_settings(request, kind, shards=SHARDS)
    peer = cassandra_peer(request, kind)
    m = StateMetrics(CollectorRegistry())
    words = spec(ttl_s)
    backing = CassandraBackingMap(settings, words, metrics=m)
    state = OpaqueMap(CasCachedMap(backing), metrics=m)
    commit(state, 1, FIRST)
    reader = CassandraTableReader(settings)
    assert {r["word"]: r["count"] for r in reader.top(words, 10, "count")} == FIRST
    if peer.server is not None:
        peer.server.advance_clock(ttl_s + 1)
    else:
        time.sleep(ttl_s + 1.5)
    assert reader.get(words, [(w,) for w in FIRST]) == [None] * len(FIRST)
    assert reader.top(words, 10, "count") == []
    assert list(scan_rows(settings, words)) == []
    assert list(scan_keys(settings, words)) == []
    commit(state, 2, SECOND)
    rows = {r["word"]: (r["shard"], r["txid"], r["count"], r["prev_count"])
            for r in backing.client.session.execute(f"SELECT * FROM {settings.keyspace}.word_counts")}
    assert rows == {w: (zlib.crc32(w.encode()) % SHARDS, 2, n, None) for w, n in SECOND.items()}
    assert m.value("trident_cas_conflicts_total") == sum(1 for w in SECOND if w in FIRST)  # "the" and "a" expired


@pytest.mark.parametrize("shards", [0, SHARDS])
def test_a_table_with_ttl_is_created_so_that_its_expired_rows_are_purged_in_hours(
        request: pytest.FixtureRequest, shards: int) -> None:
    """``gc_grace_seconds`` of the hint window (not 10 days) and tombstone compactions of single SSTables, on either
    layout; a table without ``ttl_s`` keeps the server's defaults."""
    settings = cassandra_settings(request, "real", shards=shards)
    CassandraBackingMap(settings, spec(3600))
    CassandraBackingMap(settings, replace(spec(None), table="forever"))
    session = CassandraBackingMap(settings, spec(3600)).client.session
    options = {r["table_name"]: (r["gc_grace_seconds"], dict(r["compaction"])) for r in session.execute(
        "SELECT table_name, gc_grace_seconds, compaction FROM system_schema.tables WHERE keyspace_name = %s",
        (settings.keyspace,))}
    grace, compaction = options["word_counts"]
    assert grace == EXPIRING_GC_GRACE_S
    assert compaction["class"].endswith("SizeTieredCompactionStrategy")
    assert compaction["unchecked_tombstone_compaction"] == "true"
    assert compaction["tombstone_compaction_interval"] == str(EXPIRING_GC_GRACE_S)
    assert options["forever"][0] == 864_000
    assert "unchecked_tombstone_compaction" not in options["forever"][1]


def test_settings_without_a_ttl_change_nothing() -> None:
    """The CQL a table without ``ttl_s`` is created with has no expiry options (the server's defaults stay)."""
    from states.cassandra.schema import TableShape
    from states.layout import RowLayout

    assert "gc_grace_seconds" not in TableShape.of("ks", RowLayout(spec(None)), SHARDS).create_cql()
    assert f"gc_grace_seconds = {EXPIRING_GC_GRACE_S}" in TableShape.of("ks", RowLayout(spec(60)), SHARDS).create_cql()
