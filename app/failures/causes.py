"""An error and every error it wraps (``__cause__``, else ``__context__``), each once: where typed checks look."""

from __future__ import annotations

from collections.abc import Iterator


def chain(e: BaseException) -> Iterator[BaseException]:
    """``e``, then what it was raised from or during, and so on; a cycle ends the walk."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__
