"""The contract every backing map keeps, run against every backend in ``backends.BACKING_MAPS``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from states.cached import CasCachedMap
from states.cas import cas_update
from states.errors import CasRetriesExhaustedError, StaleBatchError
from states.metrics import StateMetrics
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


class TestCasLoopContract:
    """The one read / compute / compare-and-set loop, over every backend, bare and behind the cache: a
    pipelining map (Cassandra) and a batching one (memory, SQLite) must give the same answers. A
    zombie writer is a compute that writes the key behind the loop's back, between its read and its
    compare-and-set."""

    KEYS = tuple((f"w{i}", i) for i in range(60))

    @pytest.fixture(params=[False, True], ids=["bare", "cached"])
    def loop(self, request: pytest.FixtureRequest, backend_name: str) -> tuple[Any, Any, StateMetrics]:
        backing = BACKING_MAPS[backend_name](SPECS["plain"], request).map
        backing.multi_put(self.KEYS[::2], [i * 10 for i in range(0, 60, 2)])  # every other key exists
        metrics = StateMetrics(CollectorRegistry())
        return (CasCachedMap(backing, 1000) if request.param else backing), backing, metrics

    @staticmethod
    def plus(n: int, zombie: Callable[[int | None], None] = lambda seen: None) -> Callable[[int | None], int]:
        def compute(stored: int | None) -> int:
            zombie(stored)
            return (stored or 0) + n
        return compute

    def test_a_conflict_recomputes_from_the_value_the_failed_compare_and_set_returned(
            self, loop: tuple[Any, Any, StateMetrics]) -> None:
        """Keys 3 (absent) and 4 (present) are written by a zombie once: each is recomputed from the
        zombie's value, the others from what was read; one conflict each."""
        m, backing, metrics = loop
        seen: dict[int, list[int | None]] = {3: [], 4: []}

        def zombie(i: int) -> Callable[[int | None], None]:
            def write(stored: int | None) -> None:
                seen[i].append(stored)
                if len(seen[i]) == 1:
                    backing.multi_put([self.KEYS[i]], [1000 + i])
            return write

        computes = [self.plus(1, zombie(i)) if i in seen else self.plus(1) for i in range(60)]
        result = cas_update(m, self.KEYS, computes, metrics=metrics)
        expected = [(i * 10 if i % 2 == 0 else 0) + 1 for i in range(60)]
        expected[3], expected[4] = 1004, 1005
        assert result == expected
        assert backing.multi_get(self.KEYS) == expected
        assert seen == {3: [None, 1003], 4: [40, 1004]}
        assert metrics.value("trident_cas_conflicts_total") == 2

    def test_attempts_are_bounded_per_key(self, loop: tuple[Any, Any, StateMetrics]) -> None:
        """A key the zombie rewrites before every compare-and-set fails after max_attempts, naming the key;
        the other keys are written."""
        m, backing, metrics = loop
        rewrites = iter(range(2000, 3000))
        computes = [self.plus(1, lambda seen: backing.multi_put([self.KEYS[5]], [next(rewrites)])) if i == 5
                    else self.plus(1) for i in range(60)]
        with pytest.raises(CasRetriesExhaustedError) as e:
            cas_update(m, self.KEYS, computes, max_attempts=3, metrics=metrics)
        assert e.value.keys == [self.KEYS[5]]
        assert e.value.attempts == 3
        assert backing.multi_get(self.KEYS[:2]) == [1, 1]
        assert metrics.value("trident_cas_conflicts_total") == 3

    def test_an_unchanged_value_is_not_written(self, loop: tuple[Any, Any, StateMetrics]) -> None:
        """A compute that returns what it read sends nothing: the zombie's write stays, no conflict."""
        m, backing, metrics = loop
        computes = [self.plus(0, lambda seen: backing.multi_put([self.KEYS[2]], [777])) if i == 2
                    else self.plus(0) for i in range(60)]
        assert cas_update(m, self.KEYS, computes, metrics=metrics)[2] == 20
        assert backing.multi_get([self.KEYS[2]]) == [777]
        assert metrics.value("trident_cas_conflicts_total") == 0

    def test_a_stale_batch_names_its_key(self, loop: tuple[Any, Any, StateMetrics]) -> None:
        """A compute that finds a later txid stops the loop with StaleBatchError naming the key."""
        m, _, metrics = loop

        def stale(stored: int | None) -> int:
            raise StaleBatchError(5, 6)

        with pytest.raises(StaleBatchError) as e:
            cas_update(m, self.KEYS, [stale if i == 7 else self.plus(1) for i in range(60)], metrics=metrics)
        assert e.value.key == self.KEYS[7]
        assert e.value.stored_txid == 6


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
