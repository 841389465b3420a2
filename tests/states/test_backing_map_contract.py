"""The contract every backing map keeps, run against every backend in ``backends.BACKING_MAPS``."""

from __future__ import annotations

import pytest

from states.cached import CasCachedMap
from states.opaque import OpaqueMap
from states.protocols import CasBackingMap
from states.spec import Column, MapSpec, StateKind
from states.transactional import TransactionalMap
from states.values import OpaqueValue, TransactionalValue
from tests.states.backends import BACKING_MAPS, Backend

KEY = (Column("word", "text"), Column("bucket", "bigint"))
SPECS = {
    "opaque": MapSpec("contract_opaque", StateKind.OPAQUE, KEY, (Column("count", "bigint"),)),
    "transactional": MapSpec("contract_tx", StateKind.TRANSACTIONAL, KEY, (Column("count", "bigint"),)),
    "plain": MapSpec("contract_plain", StateKind.NON_TRANSACTIONAL, KEY, (Column("count", "bigint"),)),
    "opaque_multi": MapSpec("contract_multi", StateKind.OPAQUE, KEY,
                            (Column("total", "double"), Column("biggest", "bigint"), Column("label", "text"))),
}
# One stored value per spec, and a different one, for round trips and compare-and-set.
SAMPLES = {
    "opaque": (OpaqueValue(3, 7, None), OpaqueValue(4, 9, 7)),
    "transactional": (TransactionalValue(3, 7), TransactionalValue(4, 2**62)),
    "plain": (7, -5),
    "opaque_multi": (OpaqueValue(1, (1.5, 10, "a"), None), OpaqueValue(2, (3.25, 12, "ü"), (1.5, 10, "a"))),
}


@pytest.fixture(params=sorted(BACKING_MAPS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=sorted(SPECS))
def case(request: pytest.FixtureRequest, backend_name: str) -> tuple[Backend, str]:
    return BACKING_MAPS[backend_name](SPECS[request.param], request), request.param


class TestBackingMapContract:
    def test_missing_keys_read_as_none(self, case: tuple[Backend, str]) -> None:
        """Keys never written come back as None, in the order asked."""
        backend, _ = case
        assert backend.map.multi_get([("nope", 1), ("nada", 2)]) == [None, None]

    def test_put_then_get_round_trips_values_and_composite_keys(self, case: tuple[Backend, str]) -> None:
        """What is put is what is read, for every value kind, keyed by a composite key."""
        backend, name = case
        a, b = SAMPLES[name]
        backend.map.multi_put([("the", 1), ("the", 2), ("naïve 'quoted'", -3)], [a, b, a])
        assert backend.map.multi_get([("the", 2), ("missing", 0), ("the", 1), ("naïve 'quoted'", -3)]) == [b, None, a, a]

    def test_put_overwrites(self, case: tuple[Backend, str]) -> None:
        """A second put of a key replaces its value."""
        backend, name = case
        a, b = SAMPLES[name]
        backend.map.multi_put([("k", 1)], [a])
        backend.map.multi_put([("k", 1)], [b])
        assert backend.map.multi_get([("k", 1)]) == [b]

    def test_many_keys_in_one_call(self, case: tuple[Backend, str]) -> None:
        """A few hundred keys round-trip in one call, order preserved."""
        backend, name = case
        a, b = SAMPLES[name]
        keys = [(f"w{i}", i) for i in range(300)]
        values = [a if i % 2 else b for i in range(300)]
        backend.map.multi_put(keys, values)
        assert backend.map.multi_get(list(reversed(keys))) == list(reversed(values))

    def test_durable_backends_survive_reopen(self, case: tuple[Backend, str]) -> None:
        """A durable backend's second instance over the same storage reads what the first wrote."""
        backend, name = case
        if backend.reopen is None:
            assert backend.map.multi_get([("k", 1)]) == [None]  # in-memory: nothing to reopen
            return
        a, _ = SAMPLES[name]
        backend.map.multi_put([("k", 1)], [a])
        assert backend.reopen().multi_get([("k", 1)]) == [a]


class TestCasContract:
    @pytest.fixture
    def cas(self, case: tuple[Backend, str]) -> tuple[CasBackingMap, str]:
        backend, name = case
        assert isinstance(backend.map, CasBackingMap), "every backend of this project supports compare-and-set"
        return backend.map, name

    def test_insert_if_absent(self, cas: tuple[CasBackingMap, str]) -> None:
        """Expected None applies when the key is absent and fails with the current value when present."""
        m, name = cas
        a, b = SAMPLES[name]
        assert [r.applied for r in m.multi_cas([("k", 1)], [None], [a])] == [True]
        r = m.multi_cas([("k", 1)], [None], [b])[0]
        assert (r.applied, r.current) == (False, a)
        assert m.multi_get([("k", 1)]) == [a]

    def test_update_if_unchanged(self, cas: tuple[CasBackingMap, str]) -> None:
        """A CAS on the value read applies; a CAS on a stale value fails and returns the current one."""
        m, name = cas
        a, b = SAMPLES[name]
        m.multi_put([("k", 1)], [a])
        assert m.multi_cas([("k", 1)], [a], [b])[0].applied
        stale = m.multi_cas([("k", 1)], [a], [a])[0]
        assert (stale.applied, stale.current) == (False, b)
        assert m.multi_get([("k", 1)]) == [b]

    def test_cas_on_absent_key_with_expected_value_fails(self, cas: tuple[CasBackingMap, str]) -> None:
        """Expecting a value where there is none fails and reports None as current."""
        m, name = cas
        a, b = SAMPLES[name]
        r = m.multi_cas([("ghost", 1)], [a], [b])[0]
        assert (r.applied, r.current) == (False, None)
        assert m.multi_get([("ghost", 1)]) == [None]

    def test_mixed_batch_reports_each_key(self, cas: tuple[CasBackingMap, str]) -> None:
        """In one call, each key's CAS succeeds or fails on its own."""
        m, name = cas
        a, b = SAMPLES[name]
        m.multi_put([("x", 1), ("y", 1)], [a, a])
        results = m.multi_cas([("x", 1), ("y", 1), ("z", 1)], [a, b, None], [b, b, b])
        assert [r.applied for r in results] == [True, False, True]
        assert results[1].current == a
        assert m.multi_get([("x", 1), ("y", 1), ("z", 1)]) == [b, a, b]


class TestMapStateReadsDuringCommit:
    """Trident's reads over every backing map: a replay reads the value from before its txid."""

    @pytest.fixture(params=[("opaque", False), ("opaque", True), ("transactional", False), ("transactional", True)],
                    ids=lambda p: f"{p[0]}{'-cached' if p[1] else ''}")
    def state(self, request: pytest.FixtureRequest, backend_name: str) -> OpaqueMap | TransactionalMap:
        name, cached = request.param
        backing = BACKING_MAPS[backend_name](SPECS[name], request).map
        inner = CasCachedMap(backing, 100) if cached else backing
        return OpaqueMap(inner) if name == "opaque" else TransactionalMap(inner)

    @staticmethod
    def read_modify_put(state: OpaqueMap | TransactionalMap, txid: int, n: int) -> None:
        state.begin_commit(txid)
        [old] = state.multi_get([("k", 1)])
        state.multi_put([("k", 1)], [(old or 0) + n])
        state.commit(txid)

    def test_replayed_read_modify_put_counts_once(self, state: OpaqueMap | TransactionalMap) -> None:
        """multi_get then multi_put of value + 5, replayed: 5 after txid 1 twice, 10 after txid 2."""
        self.read_modify_put(state, 1, 5)
        self.read_modify_put(state, 1, 5)
        assert state.multi_get([("k", 1)]) == [5]
        self.read_modify_put(state, 2, 5)
        self.read_modify_put(state, 2, 5)
        assert state.multi_get([("k", 1)]) == [10]
