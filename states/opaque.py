"""OpaqueMap: exactly-once map state even when a replayed txid carries different records."""

from __future__ import annotations

from states.spec import StateKind
from states.txid_map import TxidMap
from states.values import OpaqueValue


class OpaqueMap(TxidMap):
    """Map state storing :class:`OpaqueValue` in any backing map (Trident's ``OpaqueMap``)."""

    kind = StateKind.OPAQUE
    value_type = OpaqueValue
