"""A run of failed steps: what the policy is told about each (how long, how many alike) and the degraded state."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from app.failures.error_text import describe
from app.failures.policy import FATAL, Decision, Failure, FailurePolicy
from app.failures.spark_errors import deterministic_spark_error, error_key
from app.topology.batch import Batch
from spouts.errors import DataLossError, PartitionUnavailableError, SpoutError
from spouts.protocols import ArrowSpout, PartitionedSpout, SpoutKind
from spouts.typed_failures import typed_read_failure

log = logging.getLogger("app.coordinator")  # the coordinator's lines, under the name operators filter on


@dataclass(frozen=True, slots=True)
class Degraded:
    """Why the pipeline is not making progress now, and since when (wall-clock seconds)."""

    reason: str
    since: float
    failures: int


class FailureStreak:
    """Failures in a row until a commit or an idle step ends them: the policy's inputs and the degraded state."""

    def __init__(self, topology_id: str, policy: FailurePolicy, *, clock: Callable[[], float],
                 wall_clock: Callable[[], float]) -> None:
        self.topology_id, self.policy = topology_id, policy
        self._clock, self._wall_clock = clock, wall_clock
        self.degraded: Degraded | None = None  # set while failures repeat
        self._since: float | None = None  # monotonic
        self._same_error: tuple[int, str, int] = (0, "", 0)  # txid, error key, attempts failed alike
        self._asked: tuple[int, str] = (0, "")  # the txid and error the source was last asked about

    def typed(self, error: Exception, spout: PartitionedSpout, head: Batch | None, txid: int) -> Exception:
        """The source's typed error for ``error`` when it reached the driver only as text, asked once per txid
        and error (:func:`typed_read_error`); else ``error``."""
        if head is None or self._asked == (txid, error_key(error)):
            return error
        self._asked = (txid, error_key(error))
        return typed_read_error(self.topology_id, spout, error, head)

    def decide(self, error: Exception, txid: int, attempt: int, *, frozen_read: bool, kind: SpoutKind) -> Decision:
        """The policy's decision on one more failure, logged; a retried one makes the pipeline degraded."""
        now = self._clock()
        if self._since is None:
            self._since = now
        key = error_key(error)
        same = self._same_error[2] + 1 if self._same_error[:2] == (txid, key) else 1
        self._same_error = (txid, key, same)
        failures = 1 if self.degraded is None else self.degraded.failures + 1
        decision = self.policy.decide(Failure(error, txid, attempt, failures, now - self._since, same,
                                              frozen_read=frozen_read))
        if decision.permanent:
            log.error("pipeline %s: txid %d attempt %d failed permanently (%s); stopping", self.topology_id, txid,
                      attempt, decision.reason)
            return decision
        since = self._wall_clock() if self.degraded is None else self.degraded.since
        reason = decision.reason
        if kind is SpoutKind.TRANSACTIONAL and isinstance(error, PartitionUnavailableError):
            reason = f"transactional spout stalled: txid {txid} keeps its ranges and waits ({reason})"
            log.warning("pipeline %s: %s", self.topology_id, reason)
        self.degraded = Degraded(reason, since, failures)
        log.warning("pipeline %s: txid %d attempt %d failed (%s); replaying it and every later txid in %.2f s "
                    "(failure %d in a row)", self.topology_id, txid, attempt, describe(error), decision.retry_in_s,
                    failures)
        return decision

    def healthy(self) -> None:
        """A commit or an idle step: the run of failures is over."""
        if self.degraded is not None:
            log.info("pipeline %s: healthy again after %d failures", self.topology_id, self.degraded.failures)
        self.degraded, self._since = None, None


def typed_read_error(topology_id: str, spout: PartitionedSpout, error: Exception, batch: Batch) -> Exception:
    """For a failure that reached the driver only as a Spark task's text, the typed error the source raises
    here when one range of each of ``batch``'s topics is read (:mod:`spouts.typed_failures`); else ``error``."""
    if isinstance(error, (SpoutError, *FATAL)) or deterministic_spark_error(error) is not None \
            or not isinstance(spout, ArrowSpout):
        return error
    typed = typed_read_failure(spout, batch.plan)
    if typed is None:
        return error
    log.warning("pipeline %s: txid %d failed (%s, its text only); reading its ranges here: %s",
                topology_id, batch.txid, type(error).__name__, typed)
    return typed


def frozen_read_lost(head: Batch | None, error: Exception) -> bool:
    """A frozen txid whose ranges the source no longer holds (the policy decides by the bad-data rule)."""
    return head is not None and head.frozen and isinstance(error, DataLossError)
