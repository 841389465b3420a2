"""The cyclic garbage collector paused while a chunk of records is read and converted.

A read holds about ten thousand ``Message`` objects alive while it allocates per record, which
triggers collection after collection that traverse them all for nothing (messages and Arrow
buffers hold no reference cycles): a large share of the read's CPU on a real broker (figures in
docs/performance.md, "A read fetches about its range, and runs without the garbage collector"). The pause
never spans a ``yield``, so a reader abandoned mid-range cannot leave the collector off, and
nested or concurrent pauses (threads of one executor) switch it back on when the last one ends.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Pauses:
    """How many pauses are open, and whether collection was on before the first of them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False


_pauses = _Pauses()


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collection off inside the block; restored to what it was once the outermost pause ends."""
    with _pauses.lock:
        if _pauses.depth == 0:
            _pauses.was_enabled = gc.isenabled()
            gc.disable()
        _pauses.depth += 1
    try:
        yield
    finally:
        with _pauses.lock:
            _pauses.depth -= 1
            if _pauses.depth == 0 and _pauses.was_enabled:
                gc.enable()
