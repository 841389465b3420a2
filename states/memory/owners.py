"""Table claims of the memory backend: a dict per process, keyed like the memory tables themselves."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from states.factory import StateFactory

_owners: dict[tuple[object, str], str] = {}
_lock = threading.Lock()


def claim(factory: StateFactory, table: str, topology_id: str) -> str:
    """The owner of ``table`` after claiming it for ``topology_id`` (the first claim wins)."""
    with _lock:
        return _owners.setdefault((factory, table), topology_id)
