"""Exactly-once through Cassandra faults, on the CQL test server (the only peer that injects them).

Each test commits word-count batches through ``OpaqueMap`` over the Cassandra backing map (bare
and under ``CasCachedMap``), injects one failure, and ends by comparing the rows stored on the server
(read from its storage, not through the map) with a ground truth computed here by plain
arithmetic over the batches, and by checking the metrics on a registry of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from states import CasCachedMap, Count, OpaqueMap
from states.aggregators import combine_updater
from states.cassandra import (
    CassandraBackingMap,
    CassandraClient,
    CassandraSettings,
    CassandraTransactionalStateStore,
)
from states.errors import LeaseLostError, StaleBatchError, UnknownOutcomeError
from states.metrics import StateMetrics
from states.spec import Column, MapSpec, StateKind
from tests.cqlserver import CqlServer, Fault
from tests.states.helpers import at_once, opaque_truth

pytestmark = pytest.mark.timeout(60)  # a hung request fails with a stack dump instead of stalling the run

WORDS = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
BATCHES: dict[int, dict[str, int]] = {
    1: {"the": 3, "cat": 1, "sat": 1},
    2: {"the": 2, "mat": 4},
    3: {"the": 1, "cat": 2, "hat": 7, "sat": 1},
    4: {"cat": 5, "dog": 1},
}


def truth(upto: int) -> dict[str, tuple[int, int, int | None]]:
    """(txid, count, prev_count) per word after batches 1..upto, by arithmetic on BATCHES."""
    return opaque_truth(BATCHES, upto)


@pytest.fixture(params=["bare", "cached"])
def stack(request: pytest.FixtureRequest, settings: CassandraSettings) -> Callable[..., tuple[OpaqueMap, StateMetrics]]:
    """Builds OpaqueMap(backing) or OpaqueMap(CasCachedMap(backing)) with fresh metrics."""

    def make(client: CassandraClient | None = None) -> tuple[OpaqueMap, StateMetrics]:
        m = StateMetrics(CollectorRegistry())
        backing: Any = CassandraBackingMap(settings, WORDS, client=client, metrics=m)
        if request.param == "cached":
            backing = CasCachedMap(backing)
        return OpaqueMap(backing, metrics=m), m

    return make


@pytest.fixture
def other_client(settings: CassandraSettings) -> Any:
    """A second, independent session: a zombie coordinator or a retried Spark task elsewhere."""
    client = CassandraClient(settings)
    yield client
    client.close()


def commit(state: OpaqueMap, txid: int) -> None:
    batch = BATCHES[txid]
    state.begin_commit(txid)
    state.multi_update([(w,) for w in batch], [combine_updater(Count(), n) for n in batch.values()])
    state.commit(txid)


def stored(server: CqlServer, settings: CassandraSettings) -> dict[str, tuple[int, int, int | None]]:
    return {r["word"]: (r["txid"], r["count"], r["prev_count"]) for r in server.rows(settings.keyspace, "word_counts")}


def unknown(m: StateMetrics, resolution: str) -> float:
    return m.value("trident_cas_unknown_outcomes_total", resolution=resolution)


def conflicts(m: StateMetrics) -> float:
    return m.value("trident_cas_conflicts_total")


def lwts(m: StateMetrics) -> float:
    return m.value("trident_state_requests_total", backend="cassandra", kind="cas")


class TestUnknownOutcomes:
    def test_cas_timeout_that_was_applied(self, server: CqlServer, settings: CassandraSettings, stack: Any) -> None:
        """A CAS WriteTimeout whose write landed resolves as applied by a serial read: not sent again."""
        state, m = stack()
        commit(state, 1)
        commit(state, 2)
        fault = server.inject(Fault.write_timeout_cas(applied=True, table="word_counts"))
        server.reset_counts()
        commit(state, 3)
        assert fault.fired == 1
        assert stored(server, settings) == truth(3)
        assert (unknown(m, "applied"), unknown(m, "not_applied"), conflicts(m)) == (1, 0, 0)
        assert server.stats().ops("word_counts", "cas") == len(BATCHES[3])  # nothing re-sent
        assert server.stats().ops("word_counts", "serial_read") == 1

    def test_cas_timeout_that_was_not_applied(self, server: CqlServer, settings: CassandraSettings,
                                              stack: Any) -> None:
        """A CAS WriteTimeout whose write did not land resolves as not applied and is retried from the row read."""
        state, m = stack()
        commit(state, 1)
        commit(state, 2)
        server.inject(Fault.write_timeout_cas(applied=False, table="word_counts"))
        server.reset_counts()
        commit(state, 3)
        assert stored(server, settings) == truth(3)
        assert (unknown(m, "applied"), unknown(m, "not_applied")) == (0, 1)
        assert conflicts(m) == 1  # the resolved key goes round the compare-and-set loop once more
        assert server.stats().ops("word_counts", "cas") == len(BATCHES[3]) + 1
        assert server.stats().ops("word_counts", "serial_read") == 1
        read = [] if isinstance(state.backing, CasCachedMap) else BATCHES[3]  # the cache guesses new keys absent
        assert server.stats().ops("word_counts", "read") == len(read) + 1  # + the serial read; no re-read

    @pytest.mark.parametrize("applied", [True, False])
    def test_dropped_connection_during_an_lwt(self, server: CqlServer, settings: CassandraSettings, stack: Any,
                                              other_client: CassandraClient, applied: bool) -> None:
        """A connection lost under an LWT is an unknown outcome too; after reconnecting it is resolved, not re-sent."""
        state, m = stack(other_client)  # its own session: the node is marked down in this one only
        commit(state, 1)
        commit(state, 2)
        server.inject(Fault.drop_connection(applied=applied, table="word_counts", conditional=True))
        commit(state, 3)
        assert stored(server, settings) == truth(3)
        assert unknown(m, "applied" if applied else "not_applied") >= 1
        # Every LWT either landed or counted as a conflict (resolved not-applied ones included): one landing per key.
        assert lwts(m) - conflicts(m) == len(BATCHES[1]) + len(BATCHES[2]) + len(BATCHES[3])

    @pytest.mark.parametrize("kind", ["unavailable", "overloaded"])
    def test_unavailable_or_overloaded_lwt_is_resolved_not_blindly_retried(
            self, server: CqlServer, settings: CassandraSettings, stack: Any, kind: str) -> None:
        """An LWT refused with Unavailable or Overloaded is resolved by a serial read like a timeout."""
        state, m = stack()
        commit(state, 1)
        server.inject(getattr(Fault, kind)(table="word_counts", conditional=True))
        commit(state, 2)
        assert stored(server, settings) == truth(2)
        assert (unknown(m, "applied"), unknown(m, "not_applied")) == (0, 1)

    def test_unresolvable_outcome_raises_and_a_replay_recovers(self, server: CqlServer, settings: CassandraSettings,
                                                               stack: Any) -> None:
        """When even the serial read keeps failing the batch fails (UnknownOutcomeError); its replay is exact."""
        state, m = stack()
        commit(state, 1)
        plain_reads = 0 if isinstance(state.backing, CasCachedMap) else len(BATCHES[2])  # the cache guesses new keys
        server.inject(Fault.write_timeout_cas(applied=True, table="word_counts"))
        server.inject(Fault.read_timeout(table="word_counts", statement="select", after=plain_reads, times=None))
        with pytest.raises(UnknownOutcomeError):
            commit(state, 2)
        server.clear_faults()
        commit(state, 2)  # the replay: the timed-out key already holds txid 2 and is recomputed from its prev
        assert stored(server, settings) == truth(2)
        serial_reads = m.value("trident_state_requests_total", backend="cassandra", kind="serial_read")
        assert serial_reads == 1 + settings.max_retries  # retried with backoff, then given up
        assert unknown(m, "unresolved") == 1  # told apart from the resolved ones: its txid is replayed


class TestZombies:
    def test_zombie_of_the_same_txid_wrote_first(self, server: CqlServer, settings: CassandraSettings, stack: Any,
                                                 other_client: CassandraClient) -> None:
        """A zombie that committed txid 3 first leaves nothing to do: the writer's CAS fails onto identical values."""
        state, m = stack()
        zombie, _zm = stack(other_client)
        for txid in (1, 2):
            commit(state, txid)
        commit(zombie, 3)
        server.reset_counts()
        commit(state, 3)
        assert stored(server, settings) == truth(3)
        # Cached keys (and new keys, guessed absent by the cache): the LWT on the stale row fails and returns the
        # zombie's row, identical to ours, so nothing is re-sent. Uncached: the read shows the zombie's row: no LWT.
        stale = list(BATCHES[3]) if isinstance(state.backing, CasCachedMap) else []
        assert conflicts(m) == len(stale)
        assert server.stats().ops("word_counts", "cas") == len(stale)
        commit(state, 4)
        assert stored(server, settings) == truth(4)

    def test_zombie_of_the_same_txid_racing(self, server: CqlServer, settings: CassandraSettings, stack: Any,
                                            other_client: CassandraClient) -> None:
        """Two writers of txid 3 at once (LWTs slowed to interleave): every key is written exactly once, correctly."""
        state, m = stack()
        zombie, zm = stack(other_client)
        commit(state, 1)
        commit(state, 2)
        server.inject(Fault.delay(0.02, table="word_counts", conditional=True, times=None))
        assert at_once([partial(commit, s, 3) for s in (state, zombie)]) == []
        assert stored(server, settings) == truth(3)
        applied = lwts(m) + lwts(zm) - conflicts(m) - conflicts(zm)  # no unknowns here: an LWT applies or conflicts
        assert applied == len(BATCHES[1]) + len(BATCHES[2]) + len(BATCHES[3])  # each key's txid-3 write landed once

    def test_timeout_resolved_as_applied_because_a_zombie_wrote_the_same_value(
            self, server: CqlServer, settings: CassandraSettings, other_client: CassandraClient) -> None:
        """Our LWT timed out unapplied, a zombie wrote the identical txid-3 value before our serial read: "applied"."""
        m, zm = StateMetrics(CollectorRegistry()), StateMetrics(CollectorRegistry())
        state = OpaqueMap(CasCachedMap(CassandraBackingMap(settings, WORDS, metrics=m)), metrics=m)
        zombie = OpaqueMap(CasCachedMap(CassandraBackingMap(settings, WORDS, client=other_client, metrics=zm)),
                           metrics=zm)
        commit(state, 1)
        commit(state, 2)
        for s in (state, zombie):
            s.multi_get([(w,) for w in BATCHES[3]])  # warm caches: from here on both send LWTs (and we serial reads)
        n = len(BATCHES[3])
        timeouts = server.inject(Fault.write_timeout_cas(applied=False, table="word_counts", times=n))
        server.inject(Fault.delay(0.5, table="word_counts", statement="select", times=n))  # our serial reads

        def zombie_writes_when_ours_timed_out() -> None:
            deadline = time.monotonic() + 10
            while timeouts.fired < n and time.monotonic() < deadline:
                time.sleep(0.005)
            commit(zombie, 3)

        t = threading.Thread(target=zombie_writes_when_ours_timed_out)
        t.start()
        commit(state, 3)
        t.join(10)
        assert stored(server, settings) == truth(3)
        assert (unknown(m, "applied"), unknown(m, "not_applied"), conflicts(m)) == (n, 0, 0)
        assert (lwts(zm), conflicts(zm)) == (n, 0)  # the zombie's writes are the ones that landed

    def test_writer_of_an_older_txid_stops_and_writes_nothing(self, server: CqlServer, settings: CassandraSettings,
                                                              stack: Any, other_client: CassandraClient) -> None:
        """A zombie replaying txid 3 after txid 4 was stored raises StaleBatchError and changes no row."""
        state, _ = stack()
        zombie, _zm = stack(other_client)
        for txid in (1, 2):
            commit(state, txid)
        commit(zombie, 2)  # the zombie's view (and cache) stop at txid 2
        commit(state, 3)
        commit(state, 4)
        before = stored(server, settings)
        with pytest.raises(StaleBatchError) as err:
            commit(zombie, 3)
        assert err.value.batch_txid == 3
        assert err.value.stored_txid == 4
        assert stored(server, settings) == before == truth(4)


class TestLeaseLostMidCommit:
    def test_commit_mark_with_an_old_epoch_fails_and_the_new_leader_replays_exactly(
            self, server: CqlServer, settings: CassandraSettings, stack: Any, other_client: CassandraClient) -> None:
        """Leader A froze and wrote txid 3, lost its lease; its commit mark fails; B's replay of 3 is exact."""
        store_a = CassandraTransactionalStateStore(settings, "wc")
        store_b = CassandraTransactionalStateStore(settings, "wc", client=other_client)
        state_a, _ = stack()
        state_b, _ = stack(other_client)
        e1 = store_a.acquire_lease("a", 10)
        for txid in (1, 2):
            store_a.put(f"frozen/{txid}", {"txid": txid}, epoch=e1)
            commit(state_a, txid)
            store_a.put(f"committed/{txid}", {"txid": txid}, epoch=e1)
        store_a.put("frozen/3", {"txid": 3}, epoch=e1)
        commit(state_a, 3)
        server.advance_clock(11)  # A stalled past its TTL
        e2 = store_b.acquire_lease("b", 10)
        with pytest.raises(LeaseLostError) as err:
            store_a.put("committed/3", {"txid": 3}, epoch=e1)
        assert (err.value.epoch, err.value.current_epoch) == (e1, e2)
        with pytest.raises(LeaseLostError):
            store_a.put("frozen/4", {"txid": 4}, epoch=e1)
        with pytest.raises(LeaseLostError):
            store_a.delete(["frozen/1"], epoch=e1)
        docs = {r["key"] for r in server.rows(settings.keyspace, "trident_state") if r["key"] is not None}
        assert docs == {"frozen/1", "frozen/2", "committed/1", "committed/2", "frozen/3"}
        # B resumes: 3 is frozen but not committed, so it replays 3 from the frozen ranges, then commits it.
        assert store_b.get("frozen/3") == {"txid": 3}
        assert store_b.get("committed/3") is None
        commit(state_b, 3)
        store_b.put("committed/3", {"txid": 3}, epoch=e2)
        assert stored(server, settings) == truth(3)
