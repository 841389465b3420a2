"""What isolating a txid's bad records tells people: a ``/readyz`` reason, metrics, and log lines when it is slow.

An isolation that ends within :data:`SLOW_S` logs at DEBUG only (start, rounds, summary): the txid's
skip, dead-letter or stop line (:mod:`app.bad_records.error_policy`) names its bad records. One slower than that
says each further round (but the last) and its summary at INFO, so a person waiting sees what the txid
is doing. The
Java stack traces of probes that fail on purpose are kept out of the log (:func:`app.spark.bad_record_finding.quiet`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from app.metrics import Metrics
from spouts.bad_records import BadRecord

log = logging.getLogger(__name__)

SHOWN = 3  # bad records named at DEBUG after the summary
SLOW_S = 5.0  # an isolation running longer than this says its rounds and summary at INFO


class Isolation:
    """One isolation of one txid's bad records: its progress, as log lines, a status text and metrics."""

    def __init__(self, pipeline: str, txid: int, stage: str, records: int, metrics: Metrics, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pipeline, self.txid, self.stage, self.records, self.metrics = pipeline, txid, stage, records, metrics
        self.rounds = self.probes = 0
        self.status = f"isolating bad records in txid {txid}: {stage}, {records} records, starting"
        self._clock = clock
        self._started = clock()
        log.debug("pipeline %s txid %d: isolating bad records (%s stage, %d records): %s", pipeline, txid, stage,
                  records, "the transforms fail on some of them")

    def round(self, what: str, slices_left: int, found: int, probes: int = 1) -> None:
        """One round of ``probes`` jobs; ``slices_left`` still to look at, ``found`` bad records so far."""
        self.rounds += 1
        self.probes += probes
        self.metrics.isolation_rounds.labels(self.pipeline, self.stage).inc()
        self.metrics.isolation_probes.labels(self.pipeline, self.stage).inc(probes)
        self.status = (f"isolating bad records in txid {self.txid}: {self.stage}, round {self.rounds}, "
                       f"{slices_left} slices left, {found} bad records found")
        level = self._level() if slices_left else logging.DEBUG  # the last round: the summary follows at once
        log.log(level, "pipeline %s txid %d: isolation round %d (%s): %d slices left, %d bad records found "
                "(%.1f s)", self.pipeline, self.txid, self.rounds, what, slices_left, found, self._elapsed())

    def probed(self) -> None:
        """One bisection probe (a job; bisection logs no rounds, its summary counts them)."""
        self.probes += 1
        self.metrics.isolation_probes.labels(self.pipeline, self.stage).inc()
        self.status = f"isolating bad records in txid {self.txid}: {self.stage}, bisection probe {self.probes}"

    def done(self, found: Sequence[BadRecord]) -> None:
        """The summary line (the records themselves are named by the txid's skip, dead-letter or stop line; the
        first few here too at DEBUG)."""
        self.metrics.isolated_records.labels(self.pipeline, self.stage).inc(len(found))
        log.log(self._level(), "pipeline %s txid %d: isolated %d bad records of %d in %d rounds (%d jobs, %.1f s)",
                self.pipeline, self.txid, len(found), self.records, self.rounds, self.probes, self._elapsed())
        if found:
            log.debug("pipeline %s txid %d: first bad records isolated: %s%s", self.pipeline, self.txid,
                      ", ".join(f"{b.coordinates} {b.reason}" for b in found[:SHOWN]),
                      f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else "")

    def _elapsed(self) -> float:
        return self._clock() - self._started

    def _level(self) -> int:
        return logging.INFO if self._elapsed() >= SLOW_S else logging.DEBUG
