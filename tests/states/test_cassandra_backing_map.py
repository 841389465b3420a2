"""The Cassandra backing map beyond the shared contract: tables people query, schema checks, round trips.

Tests taking ``settings`` run on every Cassandra peer (the CQL test server always; a real Cassandra
when one is configured, else SKIPPED); tests taking ``server`` need the CQL server's counters or faults.
"""

from __future__ import annotations

import pickle
from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import DCAwareRoundRobinPolicy
from cassandra.protocol import ServerError
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, NonTransactionalMap, OpaqueMap, TransactionalMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings
from states.cassandra.schema import replication_cql
from states.errors import InvalidIdentifierError, SchemaMismatchError
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue
from tests.states.backends import CassandraPeer, behaviour_kind, cassandra_peer, cassandra_settings

pytestmark = pytest.mark.timeout(60)  # a hung request fails with a stack dump instead of stalling the run

WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
BUCKETED = MapSpec("bucketed", StateKind.TRANSACTIONAL, (Column("word", "text"), Column("bucket", "bigint")),
                   (Column("count", "bigint"),))


@pytest.fixture
def settings(request: pytest.FixtureRequest) -> CassandraSettings:
    """A keyspace on the real Cassandra when this run has one, else on the CQL test server; tables with a
    partition per key (``shards: 0``), the layout these tests look at (sharded: test_cassandra_shards.py)."""
    return cassandra_settings(request, behaviour_kind(request), shards=0)


@pytest.fixture
def peer(request: pytest.FixtureRequest) -> CassandraPeer:
    p = cassandra_peer(request, "cqlserver")
    p.server.clear_faults()
    p.server.reset_counts()
    request.addfinalizer(p.server.clear_faults)  # noqa: PT021  a finalizer of an object made elsewhere
    return p


@pytest.fixture
def server_settings(request: pytest.FixtureRequest, peer: CassandraPeer) -> CassandraSettings:
    return cassandra_settings(request, "cqlserver", shards=0)


def metrics() -> StateMetrics:
    return StateMetrics(CollectorRegistry())


def commit(state: Any, txid: int, counts: dict[Any, int]) -> None:
    state.begin_commit(txid)
    state.multi_update(list(counts), [combine_updater(Count(), n) for n in counts.values()])
    state.commit(txid)


def raw_session(settings: CassandraSettings) -> Any:
    """A plain driver session, as cqlsh or a user's application would open one."""
    profile = ExecutionProfile(load_balancing_policy=DCAwareRoundRobinPolicy(settings.local_dc))
    cluster = Cluster(list(settings.contact_points), port=settings.port, protocol_version=settings.protocol_version
                      or 4, execution_profiles={EXEC_PROFILE_DEFAULT: profile})
    return cluster, cluster.connect()


def requests(m: StateMetrics, kind: str) -> float:
    return m.value("trident_state_requests_total", backend="cassandra", kind=kind)


class TestTablesPeopleQuery:
    def test_cqlsh_select_returns_the_count(self, settings: CassandraSettings) -> None:
        """After two batches, SELECT word, count FROM ks.word_counts WHERE word = 'the' returns the total."""
        state = OpaqueMap(CasCachedMap(CassandraBackingMap(settings, WORDS)))
        commit(state, 1, {("the",): 3, ("cat",): 1})
        commit(state, 2, {("the",): 2})
        cluster, session = raw_session(settings)
        try:
            rows = list(session.execute(f"SELECT word, count FROM {settings.keyspace}.word_counts WHERE word = 'the'"))
            full = session.execute(f"SELECT word, txid, count, prev_count FROM {settings.keyspace}.word_counts "
                                   f"WHERE word = %s", ("the",)).one()
        finally:
            cluster.shutdown()
        assert [(r.word, r.count) for r in rows] == [("the", 5)]
        assert (full.txid, full.count, full.prev_count) == (2, 5, 3)

    def test_composite_key_is_the_partition_key_with_typed_columns(self, settings: CassandraSettings) -> None:
        """Key columns form the partition key; value, txid and (opaque) prev_ columns are typed CQL columns."""
        CassandraBackingMap(settings, BUCKETED)
        CassandraBackingMap(settings, WORDS)
        cluster, session = raw_session(settings)
        try:
            cols = {(r.table_name, r.column_name): (r.kind, r.position, r.type) for r in session.execute(
                "SELECT table_name, column_name, kind, position, type FROM system_schema.columns "
                "WHERE keyspace_name = %s", (settings.keyspace,))}
        finally:
            cluster.shutdown()
        assert cols == {
            ("bucketed", "word"): ("partition_key", 0, "text"), ("bucketed", "bucket"): ("partition_key", 1, "bigint"),
            ("bucketed", "txid"): ("regular", -1, "bigint"), ("bucketed", "count"): ("regular", -1, "bigint"),
            ("word_counts", "word"): ("partition_key", 0, "text"), ("word_counts", "txid"): ("regular", -1, "bigint"),
            ("word_counts", "count"): ("regular", -1, "bigint"),
            ("word_counts", "prev_count"): ("regular", -1, "bigint"),
        }

    def test_every_kind_and_column_type_round_trips(self, settings: CassandraSettings) -> None:
        """Transactional, non-transactional and opaque maps over typed columns (bool, int, double, blob, timestamp)."""
        tx = TransactionalMap(CassandraBackingMap(settings, BUCKETED))
        commit(tx, 1, {("a", 1): 2, ("a", 2): 3})
        commit(tx, 1, {("a", 1): 2})  # replay of an applied txid is skipped
        assert tx.multi_get([("a", 1), ("a", 2), ("b", 1)]) == [2, 3, None]
        plain = NonTransactionalMap(CassandraBackingMap(settings, MapSpec(
            "plain", StateKind.NON_TRANSACTIONAL, (Column("n", "int"),), (Column("total", "double"),))))
        plain.multi_update([(7,)], [lambda v: (v or 0) + 1.5])
        plain.multi_update([(7,)], [lambda v: (v or 0) + 1.5])
        assert plain.multi_get([(7,)]) == [3.0]
        typed = CassandraBackingMap(settings, MapSpec(
            "typed", StateKind.OPAQUE, (Column("flag", "boolean"), Column("at", "timestamp")),
            (Column("raw", "blob"), Column("x", "double"), Column("label", "text"))))
        when = datetime(2024, 5, 1, 12, 30, 15, 123000)
        value = OpaqueValue(2, (b"\x00\xff", 0.1, "ünï"), (b"", None, None))
        assert typed.multi_cas([(True, when)], [None], [value])[0].applied
        assert typed.multi_get([(True, when), (False, when)]) == [value, None]
        assert typed.multi_cas([(True, when)], [value], [OpaqueValue(3, (b"", 1.0, "x"), value.curr)])[0].applied


class TestSchemaChecks:
    def test_type_mismatch_is_a_clear_error(self, settings: CassandraSettings) -> None:
        """An existing table whose column has another type is refused, naming table, column and both types."""
        CassandraBackingMap(settings, MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),),
                                              (Column("count", "text"),)))
        with pytest.raises(SchemaMismatchError, match=rf"{settings.keyspace}\.word_counts column 'count' has type "
                                                      r"text, expected bigint"):
            CassandraBackingMap(settings, WORDS)

    def test_missing_column_is_a_clear_error_and_nothing_is_altered(self, settings: CassandraSettings) -> None:
        """A table lacking a column the spec needs is refused; the table keeps its columns."""
        tx = MapSpec("word_counts", StateKind.TRANSACTIONAL, (Column("word", "text"),), (Column("count", "bigint"),))
        CassandraBackingMap(settings, tx)
        with pytest.raises(SchemaMismatchError, match=rf"{settings.keyspace}\.word_counts has no column "
                                                      r"'prev_count' \(expected type bigint\)"):
            CassandraBackingMap(settings, WORDS)
        cluster, session = raw_session(settings)
        try:
            names = {r.column_name for r in session.execute(
                "SELECT column_name FROM system_schema.columns WHERE keyspace_name = %s AND table_name = %s",
                (settings.keyspace, "word_counts"))}
        finally:
            cluster.shutdown()
        assert names == {"word", "txid", "count"}

    def test_partition_key_mismatch_is_refused(self, settings: CassandraSettings) -> None:
        """A table keyed (word) with bucket as a clustering column is not the spec's ((word, bucket))."""
        cluster, session = raw_session(settings)
        try:
            session.execute(f"CREATE KEYSPACE IF NOT EXISTS {settings.keyspace} WITH replication = "
                            f"{replication_cql(settings.replication)}")
            session.execute(f"CREATE TABLE {settings.keyspace}.bucketed (word text, bucket bigint, txid bigint, "
                            f"count bigint, PRIMARY KEY ((word), bucket))")
        finally:
            cluster.shutdown()
        with pytest.raises(SchemaMismatchError, match=r"partition key columns \['word'\], expected \['word', "
                                                      r"'bucket'\]"):
            CassandraBackingMap(settings, BUCKETED)

    def test_bad_identifiers_never_reach_cql(self, server_settings: CassandraSettings) -> None:
        """Keyspace, table, column names and replication options are validated before any CQL is built."""
        with pytest.raises(InvalidIdentifierError):
            CassandraSettings(keyspace="ks; DROP KEYSPACE x")
        with pytest.raises(InvalidIdentifierError, match="reserved CQL keyword"):
            CassandraBackingMap(server_settings, MapSpec("t", StateKind.OPAQUE, (Column("using", "text"),),
                                                         (Column("n", "bigint"),)))
        with pytest.raises(InvalidIdentifierError, match="reserved CQL keyword"):
            CassandraBackingMap(server_settings, MapSpec("batch", StateKind.OPAQUE, (Column("k", "text"),),
                                                         (Column("n", "bigint"),)))
        with pytest.raises(InvalidIdentifierError):
            replication_cql((("class", "SimpleStrategy'} AND durable_writes = false --"),))


class TestRoundTrips:
    def test_warm_cache_costs_one_lwt_per_key_and_cold_a_read_and_an_lwt(self, peer: CassandraPeer,
                                                                        server_settings: CassandraSettings) -> None:
        """Steady state: cached 1 request per key (the LWT), uncached 2 (read + LWT); new keys 2 either way."""
        server, keys = peer.server, [(f"w{i}",) for i in range(40)]
        m = metrics()
        cached = OpaqueMap(CasCachedMap(CassandraBackingMap(server_settings, WORDS, metrics=m)), metrics=m)
        server.reset_counts()
        commit(cached, 1, dict.fromkeys(keys, 1))
        assert (server.stats().ops("word_counts", "read"), server.stats().ops("word_counts", "cas")) == (40, 40)
        server.reset_counts()
        commit(cached, 2, dict.fromkeys(keys, 1))
        assert (server.stats().ops("word_counts", "read"), server.stats().ops("word_counts", "cas")) == (0, 40)
        assert server.request_count() == 40
        uncached = OpaqueMap(CassandraBackingMap(server_settings, WORDS, metrics=m), metrics=m)
        server.reset_counts()
        commit(uncached, 3, dict.fromkeys(keys, 1))
        assert (server.stats().ops("word_counts", "read"), server.stats().ops("word_counts", "cas")) == (40, 40)
        assert server.request_count() == 80
        assert server.request_count("PREPARE") == 0  # prepared once per session
        assert (requests(m, "read"), requests(m, "cas")) == (80, 120)
        assert server.stats().consistency == {"read": "LOCAL_QUORUM", "cas": "LOCAL_QUORUM"}
        assert server.stats().serial_consistency == {"cas": "LOCAL_SERIAL"}

    def test_configured_consistency_levels_are_used(self, peer: CassandraPeer, request: pytest.FixtureRequest) -> None:
        """consistency and serial_consistency from the settings reach every read and LWT."""
        s = cassandra_settings(request, "cqlserver", consistency="QUORUM", serial_consistency="SERIAL",
                               shards=0)
        state = OpaqueMap(CassandraBackingMap(s, WORDS))
        peer.server.reset_counts()
        commit(state, 1, {("a",): 1})
        assert peer.server.stats().consistency == {"read": "QUORUM", "cas": "QUORUM"}
        assert peer.server.stats().serial_consistency == {"cas": "SERIAL"}

    def test_reads_and_plain_writes_are_retried_with_backoff(self, peer: CassandraPeer,
                                                            server_settings: CassandraSettings) -> None:
        """Read timeouts, Unavailable and Overloaded on reads, and write timeouts on plain writes, are retried."""
        m = metrics()
        backing = CassandraBackingMap(server_settings, WORDS, metrics=m)
        peer.server.inject(_fault("write_timeout", statement="insert", conditional=False))
        backing.multi_put([("a",)], [OpaqueValue(1, 1)])
        for kind in ("read_timeout", "unavailable", "overloaded"):
            peer.server.inject(_fault(kind, statement="select", table="word_counts"))
        assert backing.multi_get([("a",)]) == [OpaqueValue(1, 1)]
        assert (requests(m, "write"), requests(m, "read")) == (2, 4)

    def test_errors_that_are_not_transient_are_raised(self, peer: CassandraPeer,
                                                     server_settings: CassandraSettings) -> None:
        """A server error is not retried: it surfaces at once."""
        m = metrics()
        backing = CassandraBackingMap(server_settings, WORDS, metrics=m)
        peer.server.inject(_fault("server_error", statement="select"))
        with pytest.raises(ServerError):
            backing.multi_get([("a",)])
        assert requests(m, "read") == 1

    def test_pickles_as_settings_and_spec(self, server_settings: CassandraSettings) -> None:
        """What Spark ships to executors holds no session; the copy reconnects through its process's client."""
        backing = CassandraBackingMap(server_settings, WORDS)
        backing.multi_put([("a",)], [OpaqueValue(1, 4)])
        blob = pickle.dumps(backing)
        assert b"Cluster" not in blob
        assert b"Session" not in blob
        assert pickle.loads(blob).multi_get([("a",)]) == [OpaqueValue(1, 4)]


def _fault(kind: str, **match: Any) -> Any:
    from tests.cqlserver import Fault

    return getattr(Fault, kind)(**match)


def test_word_count_ground_truth_over_many_batches(server_settings: CassandraSettings) -> None:
    """Many batches of random words through the cached opaque stack end with exactly the counted totals."""
    import random

    rnd, total = random.Random(7), Counter[str]()
    state = OpaqueMap(CasCachedMap(CassandraBackingMap(server_settings, WORDS), size=50))
    for txid in range(1, 11):
        batch = Counter(rnd.choice("abcdefghijklmnopqrstuvwxyz") * rnd.randint(1, 3) for _ in range(200))
        total.update(batch)
        commit(state, txid, {(w,): n for w, n in batch.items()})
    stored = CassandraBackingMap(server_settings, WORDS).multi_get([(w,) for w in total])
    assert {w: v.curr for w, v in zip(total, stored, strict=False)} == dict(total)


def test_benchmark_reports_one_request_per_key_warm_and_two_cold() -> None:
    """The requests-per-key benchmark runs and finds 1 request per key with a warm cache, 2 without."""
    from tests.states.bench_requests_per_key import main

    rows = {(kind, name): total for kind, name, total, *_ in main(["--keys", "20", "--batches", "2"])}
    for kind in ("opaque", "transactional"):
        assert (rows[kind, "warm cache"], rows[kind, "cold cache"], rows[kind, "no cache"]) == (1.0, 2.0, 2.0)


def test_password_authentication_from_settings() -> None:
    """username/password from the settings authenticate (PlainTextAuthProvider); a wrong password is refused."""
    from cassandra.cluster import NoHostAvailable

    from tests.cqlserver import CqlServer

    with CqlServer(username="svc", password="s3cret") as server:
        base = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="authed",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 username="svc", password="s3cret")
        client = CassandraClient(base)
        try:
            backing = CassandraBackingMap(base, WORDS, client=client)
            backing.multi_put([("a",)], [OpaqueValue(1, 1)])
            assert backing.multi_get([("a",)]) == [OpaqueValue(1, 1)]
        finally:
            client.close()
        with pytest.raises(NoHostAvailable):
            CassandraClient(CassandraSettings(contact_points=(server.host,), port=server.port,
                                              protocol_version=max(server.protocol_versions),
                                              username="svc", password="wrong"))
