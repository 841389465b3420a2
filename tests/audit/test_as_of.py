"""Reading a key as of a committed txid (states.asof), on SQLite and on the real Cassandra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from states.aggregators import Count
from states.asof import AsOfUnsupportedError, Known, as_of, read_as_of, scan_keys, scan_stored
from states.factory import StateFactory
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue, TransactionalValue
from tests.states.backends import behaviour_kind, cassandra_settings

SPEC = MapSpec("counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


def test_the_opaque_rule_read_backwards() -> None:
    v = OpaqueValue(7, 10, 4)
    assert as_of(v, 7) == as_of(v, 9) == as_of(v, 7)
    assert (as_of(v, 9).known, as_of(v, 9).value, as_of(v, 9).stored_txid) == (Known.VALUE, 10, 7)
    assert (as_of(v, 6).known, as_of(v, 6).value) == (Known.VALUE, 4)  # one txid after T wrote it: prev
    assert as_of(v, 5).known is Known.MOVED_ON
    assert as_of(v, 5).stored_txid == 7
    assert as_of(OpaqueValue(7, 10, None), 6).value is None  # created by T + 1: absent as of T
    assert as_of(OpaqueValue(7, 10, None), 2) == as_of(OpaqueValue(7, 10, None), 5)  # created later: absent
    assert as_of(OpaqueValue(7, 10, None), 2).known is Known.VALUE
    assert as_of(OpaqueValue(7, 10, None), 2).value is None
    assert as_of(OpaqueValue(7, 10, None), 2, rows_expire=True).known is Known.MOVED_ON  # an expired row may have been
    assert as_of(None, 3) == as_of(None, 3)
    assert as_of(None, 3).value is None
    assert as_of(TransactionalValue(5, 3), 5).value == 3
    assert as_of(TransactionalValue(5, 3), 4).known is Known.MOVED_ON
    with pytest.raises(TypeError):
        as_of(12, 3)


def _factory(backend: str, request: pytest.FixtureRequest, tmp_path: Path, kind: StateKind) -> StateFactory:
    if backend == "sqlite":
        return StateFactory(kind, "sqlite", sqlite_path=str(tmp_path / "s.db"), cache_size=0)
    return StateFactory(kind, "cassandra", cassandra=cassandra_settings(request, behaviour_kind(request)), cache_size=0)


@pytest.mark.parametrize("backend", ["sqlite", "cassandra"])
def test_keys_written_by_txids_read_as_of_each_committed_txid(backend: str, request: pytest.FixtureRequest,
                                                              tmp_path: Path) -> None:
    """a: txids 1, 2; b: txids 1, 2, 3; c: txid 3 only. As of 1, 2 and 3 each key reads what it held then."""
    factory = _factory(backend, request, tmp_path, StateKind.OPAQUE)
    state = factory.make_state(SPEC)
    writes: list[dict[str, int]] = [{"a": 1, "b": 1}, {"a": 2, "b": 5}, {"b": 1, "c": 4}]
    for txid, batch in enumerate(writes, start=1):
        state.begin_commit(txid)
        state.multi_update([(k,) for k in batch], [_add(n) for n in batch.values()])
        state.commit(txid)
    backing = factory.backing_map(SPEC, create=False)
    keys: list[Any] = [("a",), ("b",), ("c",), ("never",)]

    def at(txid: int) -> list[Any]:
        return [(r.known, r.value) for r in read_as_of(backing, SPEC, keys, txid)]

    assert at(3) == [(Known.VALUE, 3), (Known.VALUE, 7), (Known.VALUE, 4), (Known.VALUE, None)]
    assert at(2) == [(Known.VALUE, 3), (Known.VALUE, 6), (Known.VALUE, None), (Known.VALUE, None)]
    assert at(1) == [(Known.VALUE, 1), (Known.MOVED_ON, None), (Known.VALUE, None), (Known.VALUE, None)]
    assert sorted(scan_keys(factory, SPEC)) == [("a",), ("b",), ("c",)]
    scanned = dict(scan_stored(factory, SPEC))  # one scan: the same values as the reads by key
    assert scanned == {("a",): OpaqueValue(2, 3, 1), ("b",): OpaqueValue(3, 7, 6), ("c",): OpaqueValue(3, 4, None)}
    assert [(as_of(scanned[k], 2).known, as_of(scanned[k], 2).value) for k in keys[:3]] == at(2)[:3]


def test_a_non_transactional_state_is_refused(tmp_path: Path) -> None:
    spec = MapSpec("nt", StateKind.NON_TRANSACTIONAL, (Column("word", "text"),), (Column("count", "bigint"),))
    factory = StateFactory(StateKind.NON_TRANSACTIONAL, "sqlite", sqlite_path=str(tmp_path / "s.db"))
    with pytest.raises(AsOfUnsupportedError, match="keeps no txid"):
        read_as_of(factory.backing_map(spec), spec, [("a",)], 1)


def _add(n: int) -> Any:
    return lambda v: Count().combine(v or 0, n)
