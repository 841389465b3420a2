"""Audits inside the service (``audit.every_s``): each pipeline it holds the lease of, in turn, on a schedule.

An audit runs in a thread of its own on the service's Spark session and reads the tables as of a
committed txid, so commits go on meanwhile (it takes no lease and writes nothing). Its share of the
time is bounded: after a round of audits that took ``d`` seconds, the next starts no sooner than
``max(every_s, d / max_share)`` after it began. Each audit sets ``trident_audit_last_*`` and logs one
line: the result, the keys that differ, the seconds. A refused or failed audit is logged and leaves
the metrics as they were.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from app.audit.compare import DIFFERENCES
from app.audit.ranges import AuditRefusedError
from app.audit.run import AuditReport, audit, log_starts_of
from app.failures.error_text import describe
from app.metrics import Metrics

log = logging.getLogger(__name__)

KEYS_LOGGED = 5  # of the keys that differ, named in the audit's line

AuditOne = Callable[[Any], AuditReport]  # audits one pipeline (a PipelineModel)


class AuditSchedule:
    """Audits ``config``'s pipelines every ``every_s`` while ``active(pipeline_id)`` (this process holds its lease).

    ``audit_one`` audits one pipeline (the default: :func:`app.audit.run.audit` on ``spark``)."""

    def __init__(self, config: Any, spark: Any, metrics: Metrics, *, active: Callable[[str], bool],
                 audit_one: AuditOne | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if config.audit.every_s is None:
            msg = "audit.every_s is not set: there is no schedule"
            raise ValueError(msg)
        self.config, self.spark, self.metrics, self.active = config, spark, metrics, active
        self.every_s: float = config.audit.every_s
        self.max_share: float = config.audit.max_share
        self._audit_one = audit_one or self._audit
        self._clock = clock
        self.audits = 0  # audits that finished (equal or not)
        self.thread = threading.Thread(target=self._main, name="audit", daemon=True)
        self._stop = threading.Event()
        self._refused: dict[str, str] = {}  # the last refusal said, per pipeline

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        self.thread.start()
        log.info("auditing every pipeline every %.0f s (at most %.0f%% of the time)", self.every_s,
                 self.max_share * 100)

    def join(self, timeout: float) -> None:
        if self.thread.ident is not None:
            self.thread.join(timeout)

    def next_wait(self, spent: float) -> float:
        """Seconds from the start of a round that took ``spent`` seconds to the next round."""
        return max(self.every_s, spent / self.max_share)

    def _main(self) -> None:
        begun = self._clock()
        wait = self.every_s
        while not self._stop.wait(max(0.0, begun + wait - self._clock())):
            begun = self._clock()
            self.round()
            spent = self._clock() - begun
            delayed, wait = wait > self.every_s, self.next_wait(spent)
            if wait > self.every_s:
                log.log(logging.DEBUG if delayed else logging.INFO, "audits took %.1f s, more than %.0f%% of "
                        "audit.every_s: the next in %.0f s (and so on while they take as long)", spent,
                        self.max_share * 100, wait)

    def round(self) -> None:
        """Audit each pipeline this process holds the lease of, once."""
        for p in self.config.pipelines:
            if self._stop.is_set():
                return
            if self.active(p.id):
                self.one(p)

    def one(self, pipeline: Any) -> AuditReport | None:
        """Audit ``pipeline``: the metrics and one log line; None when refused or failed."""
        started = self._clock()
        try:
            report = self._audit_one(pipeline)
        except AuditRefusedError as e:
            said = str(e)
            if self._refused.get(pipeline.id) != said:  # once per reason, not every interval
                log.info("pipeline %s: audit refused: %s", pipeline.id, said)
                self._refused[pipeline.id] = said
            return None
        except Exception as e:  # noqa: BLE001 - an audit never stops the service; the next one tries again
            if not self._stop.is_set():
                log.warning("pipeline %s: audit failed: %s", pipeline.id, describe(e))
            return None
        seconds = self._clock() - started
        self._refused.pop(pipeline.id, None)
        self.audits += 1
        self.metrics.record_audit(report.pipeline, report.at, report.differences, time.time())
        checked = sum(t.checked for t in report.tables)
        if not report.differences:
            log.info("pipeline %s: audit as of txid %d EQUAL: %d keys checked, %d records recounted, %.1f s",
                     report.pipeline, report.at, checked, report.records, seconds)
        else:
            log.warning("pipeline %s: audit as of txid %d found %d DIFFERENCES%s: %d keys checked, %.1f s (python -m "
                        "app audit --pipeline %s shows them all)", report.pipeline, report.at, report.differences,
                        _named(report), checked, seconds, report.pipeline)
        return report

    def _audit(self, pipeline: Any) -> AuditReport:
        from prometheus_client import CollectorRegistry

        from app.config import compile_pipeline

        # metrics of its own: the audit's reads must not move the pipeline's lag or counters
        compiled = compile_pipeline(self.config, pipeline, metrics=Metrics(CollectorRegistry()))
        return audit(self.config, compiled, lambda: self.spark, log_starts=log_starts_of(self.config, pipeline))


def _named(report: AuditReport) -> str:
    """`` (keys a, b; dead letters: 1 missing)``: what differs, briefly."""
    keys = [",".join(str(k) for k in r.key) for t in report.tables for r in t.keys
            if r.outcome in DIFFERENCES]
    parts = []
    if keys:
        more = f" and {len(keys) - KEYS_LOGGED} more" if len(keys) > KEYS_LOGGED else ""
        parts.append("keys " + ", ".join(keys[:KEYS_LOGGED]) + more)
    letters = report.dead_letters
    if letters is not None and letters.differences:
        parts.append(f"dead letters: {len(letters.missing)} missing, {len(letters.twice)} twice, "
                     f"{len(letters.unexpected)} of good records")
    return f" ({'; '.join(parts)})" if parts else ""
