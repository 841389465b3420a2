"""The seed's worked examples and the edge cases of the opaque and transactional rules."""

from __future__ import annotations

import pytest

from states import Count, OpaqueMap, StaleBatchError, TransactionalMap
from states.aggregators import combine_updater
from states.memory import MemoryBackingMap
from states.values import OpaqueValue, TransactionalValue


def add(n: int):
    return combine_updater(Count(), n)


class TestSeedExamples:
    def test_transactional_man_dog_apple(self) -> None:
        """Trident State doc: txid 3 = [man, man, dog]; man (txid 1) gets +2, dog (txid 3) is skipped, apple untouched."""
        backing = MemoryBackingMap()
        backing.multi_put([("man",), ("dog",), ("apple",)],
                          [TransactionalValue(1, 3), TransactionalValue(3, 4), TransactionalValue(2, 10)])
        state = TransactionalMap(backing)
        state.begin_commit(3)
        state.multi_update([("man",), ("dog",)], [add(2), add(1)])
        state.commit(3)
        assert backing.data == {
            ("man",): TransactionalValue(3, 5),
            ("dog",): TransactionalValue(3, 4),
            ("apple",): TransactionalValue(2, 10),
        }

    def test_opaque_newer_txid_builds_on_value(self) -> None:
        """{value=4, prevValue=1, txid=2} + partial 2 at txid 3 -> {value=6, prevValue=4, txid=3}."""
        assert OpaqueValue(2, 4, 1).update(3, 4 + 2) == OpaqueValue(3, 6, 4)
        assert OpaqueValue.next(OpaqueValue(2, 4, 1), 3, add(2)) == OpaqueValue(3, 6, 4)

    def test_opaque_same_txid_rebuilds_from_prev_value(self) -> None:
        """{value=4, prevValue=1, txid=2} + partial 2 at txid 2 again -> {value=3, prevValue=1, txid=2}."""
        assert OpaqueValue.next(OpaqueValue(2, 4, 1), 2, add(2)) == OpaqueValue(2, 3, 1)

    def test_opaque_map_applies_seed_example_through_storage(self) -> None:
        """The same two opaque cases through OpaqueMap and a backing map."""
        backing = MemoryBackingMap()
        backing.multi_put([("a",), ("b",)], [OpaqueValue(2, 4, 1), OpaqueValue(2, 4, 1)])
        for txid, key in ((3, ("a",)), (2, ("b",))):
            state = OpaqueMap(backing)
            state.begin_commit(txid)
            state.multi_update([key], [add(2)])
            state.commit(txid)
        assert backing.data == {("a",): OpaqueValue(3, 6, 4), ("b",): OpaqueValue(2, 3, 1)}


class TestRules:
    def test_opaque_batch_behind_state_raises_typed_error(self) -> None:
        """A batch older than the stored txid is refused with the txids in the error."""
        with pytest.raises(StaleBatchError) as e:
            OpaqueValue.next(OpaqueValue(5, 10, 7), 4, add(1))
        assert (e.value.batch_txid, e.value.stored_txid) == (4, 5)

    def test_transactional_batch_behind_state_raises(self) -> None:
        with pytest.raises(StaleBatchError):
            TransactionalValue.next(TransactionalValue(5, 10), 4, add(1))

    def test_new_key_starts_from_nothing(self) -> None:
        """A key never stored gets the partial itself, with no previous value."""
        assert OpaqueValue.next(None, 7, add(3)) == OpaqueValue(7, 3, None)
        assert TransactionalValue.next(None, 7, add(3)) == TransactionalValue(7, 3)

    def test_first_txid_replayed_rebuilds_from_none(self) -> None:
        """A replay of the txid that created a key recomputes from nothing, ignoring the earlier attempt."""
        assert OpaqueValue.next(OpaqueValue(7, 3, None), 7, add(5)) == OpaqueValue(7, 5, None)

    def test_transactional_same_txid_is_a_no_op(self) -> None:
        stored = TransactionalValue(4, 9)
        assert TransactionalValue.next(stored, 4, add(100)) is stored
