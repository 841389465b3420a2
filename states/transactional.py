"""TransactionalMap: exactly-once map state for spouts whose txids always carry the same records."""

from __future__ import annotations

from states.spec import StateKind
from states.txid_map import TxidMap
from states.values import TransactionalValue


class TransactionalMap(TxidMap):
    """Map state storing :class:`TransactionalValue` in any backing map (Trident's ``TransactionalMap``)."""

    kind = StateKind.TRANSACTIONAL
    value_type = TransactionalValue
