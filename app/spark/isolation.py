"""What isolating a txid's bad records tells people: a few log lines, a ``/readyz`` reason and metrics.

One line when isolation starts (txid, stage, records), one per round (slices left, bad records found
so far), one summary with the first few bad records (coordinates and error). The Java stack traces of
probes that fail on purpose are kept out of the log (:func:`app.spark.bad_records.quiet`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from app.metrics import Metrics
from spouts.bad_records import BadRecord

log = logging.getLogger(__name__)

SHOWN = 3  # bad records named in the summary line


class Isolation:
    """One isolation of one txid's bad records: its progress, as log lines, a status text and metrics."""

    def __init__(self, pipeline: str, txid: int, stage: str, records: int, metrics: Metrics) -> None:
        self.pipeline, self.txid, self.stage, self.records, self.metrics = pipeline, txid, stage, records, metrics
        self.rounds = self.probes = 0
        self.status = f"isolating bad records in txid {txid}: {stage}, {records} records, starting"
        self._started = time.monotonic()
        log.warning("pipeline %s txid %d: isolating bad records (%s stage, %d records): %s", pipeline, txid, stage,
                    records, "the transforms fail on some of them")

    def round(self, what: str, slices_left: int, found: int, probes: int = 1) -> None:
        """One round of ``probes`` jobs; ``slices_left`` still to look at, ``found`` bad records so far."""
        self.rounds += 1
        self.probes += probes
        self.metrics.isolation_rounds.labels(self.pipeline, self.stage).inc()
        self.metrics.isolation_probes.labels(self.pipeline, self.stage).inc(probes)
        self.status = (f"isolating bad records in txid {self.txid}: {self.stage}, round {self.rounds}, "
                       f"{slices_left} slices left, {found} bad records found")
        log.info("pipeline %s txid %d: isolation round %d (%s): %d slices left, %d bad records found (%.1f s)",
                 self.pipeline, self.txid, self.rounds, what, slices_left, found, time.monotonic() - self._started)

    def probed(self) -> None:
        """One bisection probe (a job; bisection logs no rounds, its summary counts them)."""
        self.probes += 1
        self.metrics.isolation_probes.labels(self.pipeline, self.stage).inc()
        self.status = f"isolating bad records in txid {self.txid}: {self.stage}, bisection probe {self.probes}"

    def done(self, found: Sequence[BadRecord]) -> None:
        """The summary line, with the first few bad records."""
        self.metrics.isolated_records.labels(self.pipeline, self.stage).inc(len(found))
        first = "; ".join(f"{b.coordinates}: {b.reason}: {b.message[:200]}" for b in found[:SHOWN])
        log.warning("pipeline %s txid %d: isolated %d bad records of %d in %d rounds (%d jobs, %.1f s); the txid runs "
                    "without them%s%s", self.pipeline, self.txid, len(found), self.records, self.rounds, self.probes,
                    time.monotonic() - self._started, f"; first: {first}" if first else "",
                    f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else "")
