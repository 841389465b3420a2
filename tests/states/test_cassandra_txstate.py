"""The Cassandra transactional-state store and lease beyond the shared contract: TTL, epochs, fencing, faults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry

from states.cassandra import CassandraSettings, CassandraTransactionalStateStore
from states.cassandra.lwt import LwtUndecidedError
from states.errors import LeaseHeldError, LeaseLostError
from states.metrics import StateMetrics
from tests.cqlserver import CqlServer, Fault

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def metrics() -> StateMetrics:
    return StateMetrics(CollectorRegistry())


def lease_row(server: CqlServer, settings: CassandraSettings, topology: str) -> dict[str, Any]:
    rows = server.execute(f"SELECT owner, epoch, TTL(owner) AS ttl FROM {settings.keyspace}.trident_state "
                          f"WHERE topology = ? LIMIT 1", [topology])
    return rows[0] if rows else {}


class TestLease:
    def test_owner_expires_with_its_ttl_and_the_epoch_survives(self, server: CqlServer,
                                                              settings: CassandraSettings) -> None:
        """The owner cell carries the lease TTL; after it runs out the epoch is still there and the next one grows."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e1 = store.acquire_lease("a", 30)
        row = lease_row(server, settings, "wc")
        assert (row["owner"], row["epoch"]) == ("a", e1)
        assert 0 < row["ttl"] <= 30
        server.advance_clock(31)
        row = lease_row(server, settings, "wc")
        assert (row["owner"], row["epoch"]) == (None, e1)
        assert store.acquire_lease("b", 30) == e1 + 1

    def test_renewal_extends_the_ttl(self, server: CqlServer, settings: CassandraSettings) -> None:
        """A renewed lease outlives its first TTL; an unrenewed one does not."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 10)
        server.advance_clock(8)
        store.renew_lease("a", e, 10)
        server.advance_clock(8)
        with pytest.raises(LeaseHeldError):
            store.acquire_lease("b", 10)
        server.advance_clock(3)
        with pytest.raises(LeaseLostError):
            store.renew_lease("a", e, 10)
        assert store.acquire_lease("b", 10) == e + 1

    def test_documents_are_plain_rows(self, server: CqlServer, settings: CassandraSettings) -> None:
        """Documents are JSON text in rows keyed (topology, key), readable with CQL."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 30)
        store.put("spout/00000000000000000001", {"t:0": {"next": 5}}, epoch=e)
        rows = server.execute(f"SELECT key, value FROM {settings.keyspace}.trident_state WHERE topology = 'wc'")
        assert rows == [{"key": "spout/00000000000000000001", "value": '{"t:0": {"next": 5}}'}]

    def test_a_fenced_put_or_delete_writes_nothing(self, server: CqlServer, settings: CassandraSettings) -> None:
        """After a takeover the old epoch's put and delete raise LeaseLostError and leave every row as it was."""
        a = CassandraTransactionalStateStore(settings, "wc")
        e1 = a.acquire_lease("a", 10)
        a.put("k", 1, epoch=e1)
        server.advance_clock(11)
        e2 = CassandraTransactionalStateStore(settings, "wc").acquire_lease("b", 10)
        before = server.rows(settings.keyspace, "trident_state")
        with pytest.raises(LeaseLostError):
            a.put("k", 2, epoch=e1)
        with pytest.raises(LeaseLostError):
            a.put("new", 2, epoch=e1)
        with pytest.raises(LeaseLostError):
            a.delete(["k"], epoch=e1)
        assert server.rows(settings.keyspace, "trident_state") == before
        assert a.get("k") == 1
        assert a.get("new") is None
        assert e2 == e1 + 1


class TestUnknownOutcomes:
    @pytest.mark.parametrize("applied", [True, False])
    def test_put_timeout_is_resolved(self, server: CqlServer, settings: CassandraSettings, metrics: StateMetrics,
                                     applied: bool) -> None:
        """A put whose LWT timed out is resolved by serial reads (and re-sent only if it did not land)."""
        store = CassandraTransactionalStateStore(settings, "wc", metrics=metrics)
        e = store.acquire_lease("a", 30)
        server.inject(Fault.write_timeout_cas(applied=applied, table="trident_state", statement="update"))
        store.put("frozen/1", {"txid": 1}, epoch=e)
        assert store.get("frozen/1") == {"txid": 1}
        resolution = "applied" if applied else "not_applied"
        assert metrics.value("trident_cas_unknown_outcomes_total", resolution=resolution) == 1
        assert metrics.value("trident_state_requests_total", backend="cassandra", kind="cas") == (1 if applied else 2)

    def test_put_timeout_after_a_takeover_is_lease_lost(self, server: CqlServer, settings: CassandraSettings) -> None:
        """A put that timed out while a newer coordinator took over is reported as LeaseLostError."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 10)
        server.advance_clock(11)
        CassandraTransactionalStateStore(settings, "wc").acquire_lease("b", 10)
        server.inject(Fault.write_timeout_cas(applied=False, table="trident_state", statement="update"))
        with pytest.raises(LeaseLostError):
            store.put("frozen/1", {"txid": 1}, epoch=e)
        assert store.get("frozen/1") is None

    @pytest.mark.parametrize("applied", [True, False])
    def test_acquire_timeout_is_resolved(self, server: CqlServer, settings: CassandraSettings, applied: bool) -> None:
        """A takeover batch that timed out is resolved by the next serial read: ours if it landed, else re-tried."""
        store = CassandraTransactionalStateStore(settings, "wc")
        server.inject(Fault.write_timeout_cas(applied=applied, table="trident_state", statement="batch"))
        e = store.acquire_lease("a", 30)
        assert e == 1
        with pytest.raises(LeaseHeldError):
            CassandraTransactionalStateStore(settings, "wc").acquire_lease("b", 30)
        store.put("k", "v", epoch=e)

    @pytest.mark.parametrize("applied", [True, False])
    def test_delete_timeout_is_resent_while_fenced(self, server: CqlServer, settings: CassandraSettings,
                                                   applied: bool) -> None:
        """A delete batch that timed out is sent again under the same epoch (deleting twice is harmless)."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 30)
        for k in ("s/1", "s/2", "s/3"):
            store.put(k, 1, epoch=e)
        server.inject(Fault.write_timeout_cas(applied=applied, table="trident_state", statement="batch"))
        store.delete(["s/1", "s/2"], epoch=e)
        assert store.keys("s/") == ["s/3"]

    @pytest.mark.parametrize("applied", [True, False])
    def test_renew_timeout_is_resent(self, server: CqlServer, settings: CassandraSettings, metrics: StateMetrics,
                                     applied: bool) -> None:
        """A renewal that timed out is sent again: renewing twice under the same owner and epoch is harmless.

        With ``applied=False`` the timed-out renewal never landed, so only the resent one keeps the lease alive."""
        store = CassandraTransactionalStateStore(settings, "wc", metrics=metrics)
        e = store.acquire_lease("a", 10)
        fault = server.inject(Fault.write_timeout_cas(applied=applied, table="trident_state", statement="update"))
        server.advance_clock(8)
        before = metrics.value("trident_state_requests_total", backend="cassandra", kind="lease")
        store.renew_lease("a", e, 10)
        assert fault.fired == 1
        assert metrics.value("trident_state_requests_total", backend="cassandra", kind="lease") == before + 2
        assert lease_row(server, settings, "wc")["ttl"] > 2  # renewed for 10 s, not what was left of the first 10
        server.advance_clock(8)
        with pytest.raises(LeaseHeldError):
            store.acquire_lease("b", 10)


    @pytest.mark.parametrize("applied", [True, False])
    def test_release_timeout_is_resent_and_frees_the_lease(self, server: CqlServer, settings: CassandraSettings,
                                                           applied: bool) -> None:
        """A release whose LWT timed out is sent again: the lease is free at once, the next takeover needs no TTL."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 30)
        fault = server.inject(Fault.write_timeout_cas(applied=applied, table="trident_state", statement="update"))
        store.release_lease("a", e)
        assert fault.fired == 1
        assert lease_row(server, settings, "wc")["owner"] is None
        assert CassandraTransactionalStateStore(settings, "wc").acquire_lease("b", 30) == e + 1

    @pytest.mark.parametrize("fault", [Fault.drop_connection(applied=True, table="trident_state", statement="update"),
                                       Fault.unavailable(table="trident_state", statement="update", conditional=True)],
                             ids=["dropped-after-applying", "unavailable"])
    def test_a_put_of_any_unknown_outcome_is_resolved(self, server: CqlServer, settings: CassandraSettings,
                                                      fault: Fault) -> None:
        """A dropped connection after the write landed, or Unavailable, is resolved like a timeout: stored once."""
        store = CassandraTransactionalStateStore(settings, "wc")
        e = store.acquire_lease("a", 30)
        server.inject(fault)
        store.put("frozen/1", {"txid": 1}, epoch=e)
        assert fault.fired == 1
        assert store.get("frozen/1") == {"txid": 1}


def fast(settings: CassandraSettings) -> CassandraSettings:
    """``settings`` with a backoff short enough to run out of attempts in a test."""
    return replace(settings, backoff_initial_s=0.001, backoff_max_s=0.002)


class TestUndecidedWrites:
    """Every write of the store whose outcome stays unknown through all its attempts says so with one typed error."""

    OPERATIONS: ClassVar[dict[str, tuple[str, Callable[[CassandraTransactionalStateStore, int], object]]]] = {
        "put": ("update", lambda s, e: s.put("k", 2, epoch=e)),
        "delete": ("batch", lambda s, e: s.delete(["k"], epoch=e)),
        "renew": ("update", lambda s, e: s.renew_lease("a", e, 30)),
        "release": ("update", lambda s, e: s.release_lease("a", e)),
        "acquire": ("batch", lambda s, e: s.acquire_lease("a", 30)),
    }

    @pytest.mark.parametrize("operation", sorted(OPERATIONS))
    def test_an_outcome_unknown_on_every_attempt_raises_lwt_undecided(self, server: CqlServer,
                                                                      settings: CassandraSettings,
                                                                      operation: str) -> None:
        """Every attempt times out without applying: the write raises LwtUndecidedError naming it and the last
        timeout, after exactly its attempts (a release is no longer given up silently)."""
        from cassandra import WriteTimeout

        store = CassandraTransactionalStateStore(fast(settings), "wc")
        e = store.acquire_lease("a", 30)
        store.put("k", 1, epoch=e)
        if operation == "acquire":
            store.release_lease("a", e)
        statement, call = self.OPERATIONS[operation]
        fault = server.inject(Fault.write_timeout_cas(applied=False, table="trident_state", statement=statement,
                                                      times=None))
        with pytest.raises(LwtUndecidedError) as raised:
            call(store, e)
        assert fault.fired == raised.value.attempts == 8
        assert isinstance(raised.value.last, WriteTimeout)
        assert "topology 'wc'" in raised.value.what
        server.clear_faults()
        assert store.get("k") == 1  # nothing was written by the undecided put or delete

    def test_an_undecided_release_leaves_the_lease_to_its_ttl(self, server: CqlServer,
                                                              settings: CassandraSettings) -> None:
        """The release that could not be told leaves the lease held until its TTL runs out, then it is free."""
        store = CassandraTransactionalStateStore(fast(settings), "wc")
        e = store.acquire_lease("a", 10)
        server.inject(Fault.write_timeout_cas(applied=False, table="trident_state", statement="update", times=None))
        with pytest.raises(LwtUndecidedError, match="release of the lease"):
            store.release_lease("a", e)
        server.clear_faults()
        with pytest.raises(LeaseHeldError):
            store.acquire_lease("b", 10)
        server.advance_clock(11)
        assert store.acquire_lease("b", 10) == e + 1

    def test_a_refused_write_is_raised_at_once(self, server: CqlServer, settings: CassandraSettings) -> None:
        """A failure that is no unknown outcome (a server error) is raised on the first attempt, not retried."""
        from cassandra.protocol import ServerError

        store = CassandraTransactionalStateStore(fast(settings), "wc")
        e = store.acquire_lease("a", 30)
        fault = server.inject(Fault.server_error(table="trident_state", statement="update", times=None))
        with pytest.raises(ServerError):
            store.release_lease("a", e)
        assert fault.fired == 1
