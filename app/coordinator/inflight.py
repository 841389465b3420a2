"""The txids being processed, oldest first: a failure of the oldest fails them all, a lost lease cancels them."""

from __future__ import annotations

import logging
from collections import deque

from app.failures.error_text import describe
from app.topology.batch import Batch, BatchExecutor, BatchStatus

log = logging.getLogger("app.coordinator")  # the coordinator's lines, under the name operators filter on


class InFlight(deque[Batch]):
    """In-flight txids in txid order; commits take them from the left, one at a time."""

    def fail_all(self, executor: BatchExecutor, topology_id: str) -> None:
        """A failure of txid N fails every later in-flight txid too; their running work is cancelled."""
        while self:
            b = self.pop()
            if b.future is not None and not b.future.cancel() and not b.future.done():
                try:
                    executor.cancel(b.txid)
                except Exception as e:  # noqa: BLE001 - best effort: the txid fails anyway
                    log.warning("pipeline %s: could not cancel the work of txid %d: %s", topology_id, b.txid,
                                describe(e))
            if b.status is not BatchStatus.COMMITTED:
                b.advance(BatchStatus.FAILED)

    def cancel_running(self, executor: BatchExecutor) -> None:
        """Cancel the running work of every in-flight txid (the lease is lost; the txids fail at the next check)."""
        for b in list(self):
            if b.future is not None and not b.future.done():
                executor.cancel(b.txid)
