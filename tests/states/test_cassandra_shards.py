"""Sharded state tables: keys grouped in ``shards`` partitions, a commit one conditional batch per shard.

The layout and the request counts are checked on the CQL test server (it counts requests and injects
faults); the layout, the plain-CQL read and the conflicts again on a real Cassandra when the run has one.
Every exactly-once test compares the rows stored on the server with a ground truth computed here by
arithmetic over the batches.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.cassandra import CassandraBackingMap, CassandraClient, CassandraSettings, schema
from states.cassandra.batches import MAX_BATCH_ROWS
from states.cassandra.key_index import SAI_SINCE, release
from states.cassandra.reader import CassandraTableReader
from states.cassandra.shards import shard_of
from states.errors import InvalidIdentifierError, SchemaMismatchError
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.cqlserver import CqlServer, Fault
from tests.states.backends import behaviour_kind, cassandra_settings
from tests.states.helpers import at_once, opaque_truth

pytestmark = pytest.mark.timeout(60)

SHARDS = 3
WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
BATCHES: dict[int, dict[str, int]] = {
    1: {"the": 3, "cat": 1, "sat": 1, "on": 2, "a": 1},
    2: {"the": 2, "mat": 4, "a": 3},
    3: {"the": 1, "cat": 2, "hat": 7, "sat": 1, "on": 1, "dog": 2},
}


def truth(upto: int) -> dict[str, tuple[int, int, int | None]]:
    """(txid, count, prev_count) per word after batches 1..upto, by arithmetic on BATCHES."""
    return opaque_truth(BATCHES, upto)


def shards_of(words: Any) -> int:
    return len({zlib.crc32(w.encode()) % SHARDS for w in words})


@pytest.fixture
def sharded(request: pytest.FixtureRequest, server: CqlServer) -> CassandraSettings:
    return cassandra_settings(request, "cqlserver", shards=SHARDS)


@pytest.fixture(params=["bare", "cached"])
def stack(request: pytest.FixtureRequest, sharded: CassandraSettings) -> Callable[..., tuple[OpaqueMap, StateMetrics]]:
    def make(client: CassandraClient | None = None) -> tuple[OpaqueMap, StateMetrics]:
        m = StateMetrics(CollectorRegistry())
        backing: Any = CassandraBackingMap(sharded, WORDS, client=client, metrics=m)
        return OpaqueMap(CasCachedMap(backing) if request.param == "cached" else backing, metrics=m), m

    return make


def commit(state: OpaqueMap, txid: int, batch: dict[str, int] | None = None) -> None:
    batch = BATCHES[txid] if batch is None else batch
    state.begin_commit(txid)
    state.multi_update([(w,) for w in batch], [combine_updater(Count(), n) for n in batch.values()])
    state.commit(txid)


def stored(server: CqlServer, settings: CassandraSettings) -> dict[str, tuple[int, int, int | None]]:
    rows = server.rows(settings.keyspace, "word_counts")
    assert all(r["shard"] == zlib.crc32(r["word"].encode()) % SHARDS for r in rows)  # each key in its own shard
    return {r["word"]: (r["txid"], r["count"], r["prev_count"]) for r in rows}


def lwts(m: StateMetrics) -> float:
    return m.value("trident_state_requests_total", backend="cassandra", kind="cas")


def assert_logged_query_reads_a_key(backing: CassandraBackingMap, caplog: pytest.LogCaptureFixture,
                                    keyspace: str) -> None:
    """The one log line of a sharded table made without index names the query that reads "the" (committed)."""
    logged = [r.getMessage() for r in caplog.records if "has no storage-attached index" in r.getMessage()]
    assert len(logged) == 1
    query = logged[0].split("read a key with: ")[1]
    assert query == f"SELECT * FROM {keyspace}.word_counts WHERE shard IN (0, 1, 2) AND word = ?"
    session = backing.client.session
    assert session.execute(session.prepare(query), ("the",)).one()["count"] == 3
    assert list(session.execute("SELECT index_name FROM system_schema.indexes WHERE keyspace_name = %s",
                                (keyspace,))) == []


def test_the_shard_is_crc32_of_the_key_and_stable() -> None:
    """A pure function of the key's values, the same in every process (never Python's salted hash)."""
    assert shard_of(("the",), 16) == zlib.crc32(b"the") % 16 == 6
    assert shard_of(("a", 3), 1000) == zlib.crc32(b"a\x1f3") % 1000
    assert shard_of((True, b"\x00\xff", 2.5), 7) == zlib.crc32(b"true\x1f\x00\xff\x1f2.5") % 7
    assert {shard_of((f"w{i}",), 16) for i in range(200)} == set(range(16))


class TestLayout:
    def test_a_sharded_table_is_keyed_by_shard_then_key_and_reads_in_plain_cql(
            self, request: pytest.FixtureRequest) -> None:
        """``PRIMARY KEY ((shard), word)``, the count in its comment; cqlsh reads a key with every shard listed,
        and the table reader finds it by its shard."""
        settings = cassandra_settings(request, behaviour_kind(request), shards=SHARDS)
        backing = CassandraBackingMap(settings, WORDS)
        commit(OpaqueMap(backing), 1)
        session = backing.client.session
        kinds = {r["column_name"]: (r["kind"], r["type"]) for r in session.execute(
            "SELECT column_name, kind, type FROM system_schema.columns WHERE keyspace_name = %s "
            "AND table_name = 'word_counts'", (settings.keyspace,))}
        assert kinds["shard"] == ("partition_key", "int")
        assert kinds["word"][0] == "clustering"
        comment = session.execute("SELECT comment FROM system_schema.tables WHERE keyspace_name = %s "
                                  "AND table_name = 'word_counts'", (settings.keyspace,)).one()["comment"]
        assert f"{SHARDS} shards" in comment
        row = session.execute(f"SELECT count FROM {settings.keyspace}.word_counts "
                              f"WHERE shard IN (0, 1, 2) AND word = 'the'").one()
        assert row["count"] == 3
        reader = CassandraTableReader(settings)
        got = reader.get(WORDS, [("the",), ("on",), ("absent",)])
        assert [g and g["count"] for g in got] == [3, 2, None]
        assert {r["word"]: r["count"] for r in reader.top(WORDS, 10, "count")} == {w: t[1] for w, t in truth(1).items()}

    def test_on_cassandra_5_a_key_is_read_in_plain_cql_without_its_shard(
            self, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> None:
        """The table is created with a storage-attached index on each key column: ``WHERE word = 'the'`` (and a
        composite key's columns) read a key as in a table of a partition per key; opening the table again, in a new
        session, makes no second index. On a real Cassandra 4.x: no index, and the logged query reads the key."""
        settings = cassandra_settings(request, "real", shards=SHARDS)
        with caplog.at_level(logging.INFO, logger="states.cassandra.key_index"):
            backing = CassandraBackingMap(settings, WORDS)
        session = backing.client.session
        commit(OpaqueMap(backing), 1)
        if (release(h.release_version for h in session.cluster.metadata.all_hosts()) or (0, 0)) < SAI_SINCE:
            assert_logged_query_reads_a_key(backing, caplog, settings.keyspace)
            return
        row = session.execute(f"SELECT word, count FROM {settings.keyspace}.word_counts WHERE word = 'the'").one()
        assert (row["word"], row["count"]) == ("the", 3)
        assert session.execute(f"SELECT count FROM {settings.keyspace}.word_counts WHERE word = 'absent'").one() is None
        pairs = MapSpec("pairs", StateKind.OPAQUE, (Column("word", "text"), Column("n", "int")),
                        (Column("count", "bigint"),))
        state = OpaqueMap(CassandraBackingMap(settings, pairs))
        state.begin_commit(1)
        state.multi_update([("a", 1), ("a", 2), ("b", 1)], [combine_updater(Count(), n) for n in (5, 6, 7)])
        state.commit(1)
        got = session.execute(f"SELECT word, n, count FROM {settings.keyspace}.pairs WHERE word = 'a' AND n = 2").all()
        assert [(r["word"], r["n"], r["count"]) for r in got] == [("a", 2, 6)]
        client = CassandraClient(settings)  # a new process's session: the table and its index are made again
        try:
            CassandraBackingMap(settings, WORDS, client=client)
        finally:
            client.close()
        indexes = {r["index_name"]: r["options"]["target"] for r in session.execute(
            "SELECT index_name, options FROM system_schema.indexes WHERE keyspace_name = %s", (settings.keyspace,))}
        assert indexes == {"word_counts_word_key": "word", "pairs_word_key": "word", "pairs_n_key": "n"}

    def test_before_cassandra_5_no_index_is_made_and_the_log_names_the_query_that_reads_a_key(
            self, sharded: CassandraSettings, caplog: pytest.LogCaptureFixture) -> None:
        """Cassandra 4.x (the CQL test server answers as 4.1) has no storage-attached index: none is asked for, and
        the log gives the query that works there, which reads the key."""
        with caplog.at_level(logging.INFO, logger="states.cassandra.key_index"):
            backing = CassandraBackingMap(sharded, WORDS)
        commit(OpaqueMap(backing), 1)
        assert_logged_query_reads_a_key(backing, caplog, sharded.keyspace)

    @pytest.mark.parametrize(("created", "opened", "says"), [
        (SHARDS, SHARDS + 1, f"created with {SHARDS} shards, the settings say cassandra.shards: {SHARDS + 1}"),
        (0, SHARDS, f"created with a partition per key (shards: 0), the settings say cassandra.shards: {SHARDS}"),
        (SHARDS, 0, f"created with {SHARDS} shards, the settings say cassandra.shards: 0"),
    ])
    def test_another_shard_count_is_a_schema_mismatch(self, request: pytest.FixtureRequest, created: int,
                                                      opened: int, says: str) -> None:
        """Keys looked for in other partitions would read as absent and count twice: the table is refused."""
        settings = cassandra_settings(request, "cqlserver", shards=created)
        commit(OpaqueMap(CassandraBackingMap(settings, WORDS)), 1)
        client = CassandraClient(settings)  # a new process's session: the table is checked again
        try:
            with pytest.raises(SchemaMismatchError, match=re.escape(says)):
                CassandraBackingMap(replace(settings, shards=opened), WORDS, client=client)
        finally:
            client.close()

    @pytest.mark.parametrize("created", [0, SHARDS])
    def test_with_shards_unset_a_table_is_used_as_it_was_created(self, request: pytest.FixtureRequest,
                                                                 server: CqlServer, created: int) -> None:
        """A config that leaves shards unset writes and reads a table in its own layout (in a new process's
        session): the rows after two commits equal the truth, each in the partition its layout puts it."""
        settings = cassandra_settings(request, "cqlserver", shards=created)
        commit(OpaqueMap(CassandraBackingMap(settings, WORDS)), 1)
        unset = replace(settings, shards=None)
        client = CassandraClient(unset)
        try:
            backing = CassandraBackingMap(unset, WORDS, client=client)
            commit(OpaqueMap(backing), 2)
            got = CassandraTableReader(unset, client=client).get(WORDS, [("the",), ("mat",), ("dog",)])
        finally:
            client.close()
        assert backing.shards == created
        rows = server.rows(settings.keyspace, "word_counts")
        assert {r["word"]: (r["txid"], r["count"], r["prev_count"]) for r in rows} == truth(2)
        assert all((r.get("shard") == zlib.crc32(r["word"].encode()) % SHARDS) if created else "shard" not in r
                   for r in rows)
        assert [(r or {}).get("count") for r in got] == [truth(2)["the"][1], truth(2)["mat"][1], None]

    def test_with_shards_unset_a_new_table_gets_the_default_layout(self, request: pytest.FixtureRequest,
                                                                    server: CqlServer,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
        """A table not created yet is created with DEFAULT_SHARDS (here 3), and a later session reads it so."""
        monkeypatch.setattr(schema, "DEFAULT_SHARDS", SHARDS)
        unset = cassandra_settings(request, "cqlserver", shards=None)
        commit(OpaqueMap(CassandraBackingMap(unset, WORDS)), 1)
        assert stored(server, unset) == truth(1)  # every row in its shard
        client = CassandraClient(unset)
        try:
            assert schema.table_shards(client, unset.keyspace, "word_counts", StateMetrics(CollectorRegistry())) \
                == SHARDS
            monkeypatch.setattr(schema, "DEFAULT_SHARDS", 0)  # the table's own count wins over the default
            assert CassandraBackingMap(unset, WORDS, client=client).shards == SHARDS
        finally:
            client.close()

    def test_a_column_named_shard_is_refused_in_a_sharded_table(self, sharded: CassandraSettings) -> None:
        spec = MapSpec("by_shard", StateKind.OPAQUE, (Column("shard", "text"),), (Column("count", "bigint"),))
        with pytest.raises(InvalidIdentifierError, match="shard column of a sharded table"):
            CassandraBackingMap(sharded, spec)

    def test_shards_are_bounded(self) -> None:
        for bad in (-1, 4097, True):
            with pytest.raises(ValueError, match="shards must be an integer from 0"):
                CassandraSettings(shards=bad)


class TestBatches:
    def test_a_commit_is_one_conditional_batch_per_shard(self, server: CqlServer, sharded: CassandraSettings,
                                                         stack: Any) -> None:
        state, m = stack()
        for txid in (1, 2):
            commit(state, txid)
        server.reset_counts()
        commit(state, 3)
        assert stored(server, sharded) == truth(3)
        assert lwts(m) == shards_of(BATCHES[1]) + shards_of(BATCHES[2]) + shards_of(BATCHES[3])
        assert server.stats().ops("word_counts", "cas") == shards_of(BATCHES[3])

    def test_a_shard_of_more_rows_than_a_batch_holds_goes_in_several(self, server: CqlServer,
                                                                     sharded: CassandraSettings) -> None:
        m = StateMetrics(CollectorRegistry())
        state = OpaqueMap(CassandraBackingMap(sharded, WORDS, metrics=m), metrics=m)
        words = {f"w{i}": i for i in range(MAX_BATCH_ROWS * SHARDS + 50)}
        commit(state, 1, words)
        per_shard = [sum(1 for w in words if zlib.crc32(w.encode()) % SHARDS == s) for s in range(SHARDS)]
        assert lwts(m) == sum(-(-n // MAX_BATCH_ROWS) for n in per_shard)
        assert {r["word"]: r["count"] for r in server.rows(sharded.keyspace, "word_counts")} == words

    def test_a_conflict_fails_only_its_own_row(self, request: pytest.FixtureRequest) -> None:
        """Another writer changed one key: the batch does not apply, that key is answered with the stored value and
        recomputed, the rows whose conditions held go again without it; every count equals the truth."""
        settings = cassandra_settings(request, behaviour_kind(request), shards=1)
        m = StateMetrics(CollectorRegistry())
        backing = CassandraBackingMap(settings, WORDS, metrics=m)
        state = OpaqueMap(CasCachedMap(backing), metrics=m)
        commit(state, 1)
        other = OpaqueMap(CassandraBackingMap(settings, WORDS))
        commit(other, 2, {"cat": 10})  # behind our cache's back: our cached "cat" is stale
        commit(state, 3, {"the": 1, "cat": 2, "sat": 1})
        session = backing.client.session
        rows = {r["word"]: (r["txid"], r["count"]) for r in session.execute(
            f"SELECT word, txid, count FROM {settings.keyspace}.word_counts")}
        assert rows == {"the": (3, 4), "cat": (3, 13), "sat": (3, 2), "on": (1, 2), "a": (1, 1)}
        assert m.value("trident_cas_conflicts_total") == 1  # "cat" only: the others were held back, not conflicts
        assert lwts(m) == 1 + 3  # txid 1; then the batch, "cat" alone, the two held rows


class TestFaults:
    @pytest.mark.parametrize("applied", [True, False])
    def test_a_batch_of_unknown_outcome_is_resolved_by_one_serial_read_of_its_shard(
            self, server: CqlServer, sharded: CassandraSettings, stack: Any, applied: bool) -> None:
        """A conditional batch that timed out is never sent again blindly: its rows are read back by one SERIAL read
        of its shard (never one per row); applied, the rows hold our values; not applied, they are recomputed and
        sent again."""
        state, m = stack()
        commit(state, 1)
        commit(state, 2)
        fault = server.inject(Fault.write_timeout_cas(applied=applied, table="word_counts", statement="batch"))
        server.reset_counts()
        commit(state, 3)
        assert fault.fired == 1
        assert stored(server, sharded) == truth(3)
        timed_out = max(len([w for w in BATCHES[3] if zlib.crc32(w.encode()) % SHARDS == s]) for s in range(SHARDS))
        assert server.stats().ops("word_counts", "serial_read") == 1
        assert m.value("trident_state_requests_total", backend="cassandra", kind="serial_read") == 1
        resolved = m.value("trident_cas_unknown_outcomes_total", resolution="applied" if applied else "not_applied")
        assert 1 <= resolved <= timed_out

    @pytest.mark.parametrize("applied", [True, False])
    def test_a_wave_of_timed_out_batches_is_one_serial_read_per_shard(self, request: pytest.FixtureRequest,
                                                                      server: CqlServer, applied: bool) -> None:
        """Every shard's batch of the first wave times out, with a composite key and more rows than a batch holds: one serial
        read per timed-out batch (a shard's rows read by ``IN`` on each key column), none per row, and the table ends
        exactly as the truth."""
        shards = 4
        settings = cassandra_settings(request, "cqlserver", shards=shards)
        spec = MapSpec("pairs", StateKind.OPAQUE, (Column("word", "text"), Column("n", "int")),
                       (Column("count", "bigint"),))
        m = StateMetrics(CollectorRegistry())
        state = OpaqueMap(CassandraBackingMap(settings, spec, metrics=m), metrics=m)
        batch = {(f"w{i % 150}", i % 7): 1 + i % 5 for i in range(MAX_BATCH_ROWS * shards + 100)}
        fault = server.inject(Fault.write_timeout_cas(applied=applied, table="pairs", statement="batch", times=shards))
        server.reset_counts()
        state.begin_commit(1)
        state.multi_update(list(batch), [combine_updater(Count(), n) for n in batch.values()])
        state.commit(1)
        per_shard = Counter(shard_of(k, shards) for k in batch)
        assert len(per_shard) == shards
        assert max(per_shard.values()) > MAX_BATCH_ROWS  # a shard goes in two waves: only the first times out
        assert fault.fired == shards
        assert server.stats().ops("pairs", "serial_read") == shards  # one per timed-out batch, never one per row
        first_wave = sum(min(n, MAX_BATCH_ROWS) for n in per_shard.values())
        assert m.value("trident_cas_unknown_outcomes_total",
                       resolution="applied" if applied else "not_applied") == first_wave
        rows = {(r["word"], r["n"]): (r["txid"], r["count"]) for r in server.rows(settings.keyspace, "pairs")}
        assert rows == {k: (1, n) for k, n in batch.items()}

    def test_zombie_of_the_same_txid_racing(self, server: CqlServer, sharded: CassandraSettings, stack: Any) -> None:
        """Two writers of txid 3 at once (batches slowed to interleave): every key written once, correctly."""
        state, _ = stack()
        other = CassandraClient(sharded)
        try:
            zombie, _ = stack(other)
            commit(state, 1)
            commit(state, 2)
            server.inject(Fault.delay(0.02, table="word_counts", conditional=True, times=None))
            assert at_once([partial(commit, s, 3) for s in (state, zombie)]) == []
            assert stored(server, sharded) == truth(3)
        finally:
            other.close()

    def test_a_replay_after_a_crash_mid_commit_counts_once(self, server: CqlServer, sharded: CassandraSettings,
                                                           stack: Any) -> None:
        """The commit dies after some shards' batches landed (a server error on another): its replay is exact."""
        state, _ = stack()
        commit(state, 1)
        commit(state, 2)
        server.inject(Fault.server_error(table="word_counts", statement="batch", after=1))
        with pytest.raises(Exception, match="Injected server error"):
            commit(state, 3)
        server.clear_faults()
        replay, _ = stack()  # a new process: nothing cached
        commit(replay, 3)
        assert stored(server, sharded) == truth(3)


_EXAMPLES = iter(range(10**9))


@pytest.fixture
def answers(request: pytest.FixtureRequest) -> Callable[[int], CassandraBackingMap]:
    """A table of each shard count in a keyspace of this test's own, on the real Cassandra when the run has one (its
    own Paxos, v1 or v2), else on the CQL test server; made once (a real table and its index take a second)."""
    settings = cassandra_settings(request, behaviour_kind(request))
    made: dict[int, CassandraBackingMap] = {}

    def table(shards: int) -> CassandraBackingMap:
        if shards not in made:
            spec = MapSpec(f"answers_{shards}", StateKind.NON_TRANSACTIONAL, (Column("word", "text"),),
                           (Column("count", "bigint"),))
            made[shards] = CassandraBackingMap(replace(settings, shards=shards), spec)
        return made[shards]

    return table


@hyp_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shards=st.integers(1, 4))
def test_each_row_of_a_batch_is_answered_as_its_own_lwt_would_be(answers: Callable[[int], CassandraBackingMap],
                                                                 data: st.DataObject, shards: int) -> None:
    """Rows stored or absent, each compare-and-set conditioned on the stored value or on a stale one: a row applies
    exactly when its own condition holds (whatever its batch-mates), a row that does not is answered with the
    stored value, and the table ends holding the new values of the applied rows and the old values of the others.
    Each example's keys are its own (a prefix), so examples share a table."""
    backing = answers(shards)
    prefix = f"{next(_EXAMPLES)}_"
    drawn = data.draw(st.lists(st.text("abcdef", min_size=1, max_size=3), min_size=1, max_size=30, unique=True))
    words = [prefix + w for w in drawn]
    stored = {w: data.draw(st.none() | st.integers(0, 3)) for w in words}
    present = [w for w in words if stored[w] is not None]
    if present:
        backing.multi_put(present, [stored[w] for w in present])
    stale = {w: data.draw(st.booleans()) for w in words}
    expected = [(None if stored[w] is not None else 9) if stale[w] else stored[w] for w in words]
    values = [10 + i for i in range(len(words))]
    results = backing.multi_cas(words, expected, values)
    for w, r in zip(words, results, strict=True):
        assert r.applied is not stale[w]
        assert r.applied or r.current == stored[w]
    final = dict(zip(words, backing.multi_get(words), strict=True))
    assert final == {w: v if not stale[w] else stored[w] for w, v in zip(words, values, strict=True)}
