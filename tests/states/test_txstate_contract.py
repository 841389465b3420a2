"""The contract every transactional-state store keeps (documents, lease, fencing), for every backend."""

from __future__ import annotations

import time

import pytest

from states.errors import LeaseHeldError, LeaseLostError
from states.protocols import CoordinatorStore, LeaseInfo
from states.rotating import RotatingTransactionalState
from tests.states.backends import STORES, StoreHarness


@pytest.fixture(params=sorted(STORES))
def harness(request: pytest.FixtureRequest) -> StoreHarness:
    return STORES[request.param]("topo-contract", request)


class TestDocuments:
    def test_get_missing_is_none(self, harness: StoreHarness) -> None:
        """An absent key reads as None."""
        assert harness.store.get("nothing/here") is None

    def test_put_get_round_trip_json(self, harness: StoreHarness) -> None:
        """JSON documents round-trip exactly, nested and unicode included."""
        s = harness.store
        epoch = s.acquire_lease("a", 30)
        doc = {"txid": 7, "partitions": {"t:0": {"next": 2**53}}, "name": "ünï", "ok": True, "none": None}
        s.put("coordinator", doc, epoch=epoch)
        assert s.get("coordinator") == doc
        assert harness.reopen().get("coordinator") == doc

    def test_keys_by_prefix_sorted_and_delete(self, harness: StoreHarness) -> None:
        """keys() lists one prefix in sorted order; delete removes just the named keys."""
        s = harness.store
        epoch = s.acquire_lease("a", 30)
        for k in ["b/2", "b/10", "a/1", "b/1"]:
            s.put(k, {"k": k}, epoch=epoch)
        assert s.keys("b/") == ["b/1", "b/10", "b/2"]
        s.delete(["b/1", "b/missing"], epoch=epoch)
        assert s.keys("b/") == ["b/10", "b/2"]
        assert s.get("a/1") == {"k": "a/1"}


class TestLease:
    def test_second_owner_is_refused_while_held(self, harness: StoreHarness) -> None:
        """Only one coordinator holds a topology's lease."""
        s = harness.store
        s.acquire_lease("a", 30)
        with pytest.raises(LeaseHeldError):
            harness.reopen().acquire_lease("b", 30)

    def test_takeover_after_expiry_grows_epoch_and_fences_old_writer(self, harness: StoreHarness) -> None:
        """After expiry a new owner gets a higher epoch; the old epoch's writes and renewals fail."""
        s = harness.store
        e1 = s.acquire_lease("a", 30)
        s.put("k", 1, epoch=e1)
        harness.expire_lease()
        other = harness.reopen()
        e2 = other.acquire_lease("b", 30)
        assert e2 > e1
        with pytest.raises(LeaseLostError):
            s.put("k", 2, epoch=e1)
        with pytest.raises(LeaseLostError):
            s.delete(["k"], epoch=e1)
        with pytest.raises(LeaseLostError):
            s.renew_lease("a", e1, 30)
        assert other.get("k") == 1
        other.put("k", 3, epoch=e2)
        assert s.get("k") == 3

    def test_renew_keeps_lease(self, harness: StoreHarness) -> None:
        """Renewing keeps the epoch current."""
        s = harness.store
        e = s.acquire_lease("a", 30)
        s.renew_lease("a", e, 30)
        s.put("k", "v", epoch=e)
        assert s.get("k") == "v"

    def test_release_lets_another_take_over(self, harness: StoreHarness) -> None:
        """A released lease is taken at once by another owner, with a higher epoch."""
        s = harness.store
        e1 = s.acquire_lease("a", 30)
        s.release_lease("a", e1)
        assert harness.reopen().acquire_lease("b", 30) > e1

    def test_same_owner_reacquire_bumps_epoch(self, harness: StoreHarness) -> None:
        """A restarted coordinator with the same owner name still gets a new epoch (its old self is a zombie)."""
        s = harness.store
        e1 = s.acquire_lease("a", 30)
        e2 = harness.reopen().acquire_lease("a", 30)
        assert e2 > e1
        with pytest.raises(LeaseLostError):
            s.put("k", 1, epoch=e1)


class TestLeaseInfo:
    def test_store_is_a_coordinator_store(self, harness: StoreHarness) -> None:
        """Every backend's store declares the lease methods of CoordinatorStore."""
        assert isinstance(harness.store, CoordinatorStore)

    def test_no_holder_before_the_first_acquire(self, harness: StoreHarness) -> None:
        """A lease never taken reads as None."""
        assert harness.store.lease_info() is None

    def test_holder_epoch_and_expiry_are_read_without_taking_the_lease(self, harness: StoreHarness) -> None:
        """lease_info names owner and epoch, expires about ttl from now, and leaves the lease to its owner."""
        s = harness.store
        e = s.acquire_lease("a", 30)
        before = time.time()
        info = harness.reopen().lease_info()
        assert isinstance(info, LeaseInfo)
        assert (info.owner, info.epoch) == ("a", e)
        assert info.expires_at is not None
        assert before + 20 <= info.expires_at <= time.time() + 31
        s.renew_lease("a", e, 30)  # reading took nothing: the owner still renews
        with pytest.raises(LeaseHeldError):
            harness.reopen().acquire_lease("b", 30)

    def test_none_after_release_and_after_expiry(self, harness: StoreHarness) -> None:
        """A released or expired lease has no holder; a takeover shows the new owner and epoch."""
        s = harness.store
        e1 = s.acquire_lease("a", 30)
        s.release_lease("a", e1)
        assert s.lease_info() is None
        e2 = s.acquire_lease("b", 30)
        info = s.lease_info()
        assert info is not None
        assert (info.owner, info.epoch) == ("b", e2)
        harness.expire_lease()
        assert harness.reopen().lease_info() is None


class TestRotatingState:
    def test_states_by_txid_previous_last_and_cleanup(self, harness: StoreHarness) -> None:
        """RotatingTransactionalState over the store: per-txid states, previous, cleanup and reload."""
        s = harness.store
        epoch = s.acquire_lease("a", 30)
        r = RotatingTransactionalState(s, "spout", epoch=epoch, retention=3)
        for t in (1, 2, 3, 9, 10):
            r.override_state(t, {"t": t})
        assert r.get_state(3) == {"t": 3}
        assert r.get_state(4) is None
        assert r.get_previous_state(9) == {"t": 3}
        assert r.get_previous_state(1) is None
        assert r.get_previous_state(11) == {"t": 10}
        r.rotate(10)  # keep txids >= 8
        assert r.txids == [9, 10]
        reloaded = RotatingTransactionalState(harness.reopen(), "spout", epoch=epoch, retention=3)
        assert reloaded.txids == [9, 10]
        assert reloaded.get_previous_state(10) == {"t": 9}

    def test_writes_of_a_zombie_are_fenced(self, harness: StoreHarness) -> None:
        """A rotating state holding an old epoch cannot override states after a takeover."""
        s = harness.store
        e1 = s.acquire_lease("a", 30)
        r = RotatingTransactionalState(s, "spout", epoch=e1)
        harness.expire_lease()
        harness.reopen().acquire_lease("b", 30)
        with pytest.raises(LeaseLostError):
            r.override_state(1, {"x": 1})
