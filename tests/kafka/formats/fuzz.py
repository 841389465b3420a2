"""What the decoder fuzz tests share: a decoding process that may die, the property every decoder
keeps, and the example budget (``DECODER_FUZZ_EXAMPLES``; ``make fuzz`` raises it, unseeded).

The property: every value either decodes or is a bad record with a reason, and a value decoded
alone is judged as inside a batch, beside good and bad values at any position."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

from hypothesis import HealthCheck, settings

from tests.kafka.formats.fuzz_worker import Outcome, read_frame, write_frame

_EXAMPLES = int(os.environ.get("DECODER_FUZZ_EXAMPLES", "0"))

#: The fast suite's budget: seeded (the same examples every run), bounded. ``make fuzz``: many more, random.
FUZZ = settings(max_examples=_EXAMPLES or 120, derandomize=not _EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])


class Crashed(AssertionError):
    """The decoding process died (a segmentation fault or another abort) on a batch."""


class DecodingProcess:
    """A separate Python process running :mod:`tests.kafka.formats.fuzz_worker`; restarted after a crash."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def decode(self, decoder: Any, batches: list[list[bytes | None]]) -> list[Outcome]:
        """Each batch decoded by ``decoder`` in the process; :class:`Crashed` when the process dies."""
        proc = self._started()
        assert proc.stdin is not None
        assert proc.stdout is not None
        try:
            write_frame(proc.stdin, pickle.dumps((decoder, batches)))
            answer = read_frame(proc.stdout)
        except BrokenPipeError:
            answer = None
        if answer is None:
            code = proc.wait()
            self._proc = None
            raise Crashed(f"the decoding process died (exit {code}) on {batches[0]!r:.2000}")
        outcomes: list[Outcome] = pickle.loads(answer)
        return outcomes

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen([sys.executable, "-m", "tests.kafka.formats.fuzz_worker"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
        return self._proc

    def close(self) -> None:
        if self._proc is not None:
            if self._proc.stdin is not None:
                self._proc.stdin.close()  # the worker's loop ends at end of input
            self._proc.wait(timeout=30)
            self._proc = None


def judged(outcome: Outcome, i: int) -> tuple[str, ...]:
    """Value ``i``'s verdict in a batch's outcome: ``("bad", reason, message)`` or ``("row", repr)``."""
    assert outcome[0] == "ok", f"the decoder raised: {outcome[1]}"
    _, rows, bad = outcome
    if i in bad:
        assert rows[i] == "None", f"bad value {i} has a row {rows[i]}"
        reason, message = bad[i]
        assert reason, "a bad record without a reason"
        assert message, "a bad record without a reason"
        return ("bad", reason, message)
    return ("row", rows[i])


def check(process: DecodingProcess, decoder: Any, values: list[bytes | None]) -> list[tuple[str, ...]]:
    """The property on ``values``: no crash, no exception, each value decoded or bad with a reason, and each
    judged inside the batch as alone. Returns the verdicts."""
    outcomes = process.decode(decoder, [values, *([v] for v in values)])
    together = outcomes[0]
    assert together[0] == "ok", f"the decoder raised on the batch: {together[1]}"
    assert len(together[1]) == len(values)
    verdicts = [judged(together, i) for i in range(len(values))]
    for i, (v, alone) in enumerate(zip(values, outcomes[1:], strict=False)):
        assert judged(alone, 0) == verdicts[i], f"value {i} {v!r:.200} is judged otherwise alone than in the batch"
        if v is None:
            assert verdicts[i] == ("row", "None"), "a null value (a tombstone) stays null and is never bad"
    return verdicts
