"""SnapshottableMap: a global aggregate kept as one fixed key of a map state."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from states.protocols import MapState, Updater

GLOBAL_KEY = ("$global",)  # the one key of a global aggregate
GLOBAL_KEY_COLUMN = "id"  # its table's key column: one row, id = '$global'


class SnapshottableMap:
    """One value (a global count, a global max) stored under a fixed key of any map state."""

    def __init__(self, delegate: MapState[Any, Any], key: Hashable = GLOBAL_KEY) -> None:
        self.delegate, self.key = delegate, key
        self.kind = delegate.kind

    def begin_commit(self, txid: int) -> None:
        self.delegate.begin_commit(txid)

    def commit(self, txid: int) -> None:
        self.delegate.commit(txid)

    def get(self) -> Any:
        return self.delegate.multi_get([self.key])[0]

    def update(self, updater: Updater) -> Any:
        return self.delegate.multi_update([self.key], [updater])[0]

    def set(self, value: Any) -> None:
        self.delegate.multi_put([self.key], [value])
