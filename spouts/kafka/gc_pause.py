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

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Collection off inside the block; restored to what it was once the outermost pause ends."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
