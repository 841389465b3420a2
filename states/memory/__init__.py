"""In-memory backends: the backing map and transactional-state store used by tests and demos."""

from states.memory.backing_map import MemoryBackingMap
from states.memory.txstate import MemoryTransactionalStateStore

__all__ = ["MemoryBackingMap", "MemoryTransactionalStateStore"]
