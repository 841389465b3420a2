"""Helpers of the state tests: writers racing, and the opaque truth of word-count batches."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence


def at_once(calls: Sequence[Callable[[], object]], timeout_s: float = 30.0) -> list[BaseException]:
    """Run ``calls`` in one thread each, started together; the exceptions they raised (none: all returned)."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as e:  # noqa: BLE001 - surfaced to the caller, whatever it is
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return errors


def opaque_truth(batches: Mapping[int, Mapping[str, int]], upto: int) -> dict[str, tuple[int, int, int | None]]:
    """(txid, count, prev_count) per word after ``batches`` 1..upto, by arithmetic on the batches."""
    out: dict[str, tuple[int, int, int | None]] = {}
    for txid in range(1, upto + 1):
        for word, n in batches[txid].items():
            before = out[word][1] if word in out else None
            out[word] = (txid, (before or 0) + n, before)
    return out
