"""Failure classes, decided in one place: a pure policy that turns a failed step into a decision.

The coordinator never decides by itself whether an error is worth another attempt: it hands the
error and its context (:class:`Failure`: the txid, the attempt, how long the pipeline has been
failing) to a :class:`FailurePolicy` and acts on the :class:`Decision` (the shape of the DataStax
driver's retry policies). Two classes:

- **transient** (a broker, Cassandra or the network is away): retry after a capped backoff, stay
  alive, report ``degraded`` with the reason. Ridden out for up to ``outage_limit_s`` of failing
  without a single commit or idle step in between; past that the pipeline stops (exit 1) so the
  orchestrator restarts it with fresh clients and somebody is told.
- **permanent** (it can never succeed, so retrying only hides it): stop the pipeline with an exit
  code and a message naming the object. Exit 2 for configuration that shows only at run time (an
  unknown librdkafka property, a bootstrap address that is no address, a table whose schema does not
  match) and for a refusal (:mod:`app.failures.refusals`: credentials, a missing ACL or grant, an untrusted
  certificate, told in one line naming the server, the principal and the setting to check); exit 1 for everything else (data loss under ``fail``, a batch behind the
  state, a lost lease, a deterministic error of the user's transform that fails every attempt of a
  txid alike, a poison record under ``fail``).

The policy decides by type only: refusals are recognised in :mod:`app.failures.refusals`, Spark's error
conditions read in :mod:`app.failures.spark_errors`; the reason is told by :func:`app.failures.error_text.describe`.

The exit codes equal the commands' (:mod:`app.commands.common`, which imports the config and so
cannot be imported here) and are listed in docs/configuration.md.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from confluent_kafka import KafkaError

from app.failures import errors as app_errors
from app.failures.causes import chain
from app.failures.error_text import describe
from app.failures.refusals import kafka_error, refusal
from app.failures.spark_errors import deterministic_spark_error
from spouts import errors as spout_errors
from spouts.bad_records import BadRecordError
from states import errors as state_errors

FAILED = 1  # a permanent failure at run time (the message names the object)
BAD_INPUT = 2  # configuration that only shows at run time, or a start-up error (the message names it)

#: Never retried: a replay would only repeat them (the layers' own lists).
FATAL: tuple[type[BaseException], ...] = spout_errors.FATAL + state_errors.FATAL + app_errors.FATAL

#: Why a pipeline stopped for good, few enough to be a metric label (``trident_pipeline_failures_total``):
#: ``unexpected`` is an error outside the policy (a bug, or a start-up step of the pipeline).
CAUSES = ("lease_lost", "data_loss", "stale_batch", "bad_record", "configuration", "authentication",
          "authorization", "tls", "kafka_fatal", "deterministic_error", "outage_limit", "unexpected")

#: librdkafka errors that no retry can mend (KafkaError codes): bad settings (refusals: :mod:`app.failures.refusals`).
KAFKA_CONFIG_ERRORS = frozenset({
    KafkaError._INVALID_ARG,  # librdkafka's local error codes are public, named with a leading underscore
    KafkaError._UNKNOWN_PROTOCOL,  # as above
    KafkaError._NOT_IMPLEMENTED,  # as above
})


def backoff(failures: int, first_s: float, largest_s: float) -> float:
    """The wait before the next step after ``failures`` failures in a row: doubling from ``first_s``, capped."""
    return min(largest_s, math.ldexp(first_s, min(max(failures, 1) - 1, 16)))  # first_s * 2**(failures-1)


class FailureClass(enum.StrEnum):
    TRANSIENT = "transient"  # retry after a backoff; the pipeline is degraded meanwhile
    PERMANENT = "permanent"  # stop the pipeline with ``exit_code``


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed step and its context: what failed, which attempt, and for how long failures have lasted."""

    error: BaseException
    txid: int
    attempt: int
    failures_in_a_row: int = 1
    failing_for_s: float = 0.0  # since the last commit or idle step
    same_error_attempts: int = 1  # attempts of this txid that failed with this same error class
    frozen_read: bool = False  # raised while reading a frozen txid (its ranges are re-checked before a replay)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do about a :class:`Failure`: retry after ``retry_in_s``, or stop with ``exit_code``."""

    failure_class: FailureClass
    reason: str  # one line that names the object at fault
    retry_in_s: float = 0.0
    exit_code: int = FAILED
    cause: str = "transient"  # a permanent decision's class, one of CAUSES (the failure counter's label)

    @property
    def permanent(self) -> bool:
        return self.failure_class is FailureClass.PERMANENT


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    """The default classes (module docstring). ``deterministic_attempts``: how many attempts of a txid must
    fail with the same deterministic Spark error before it counts as permanent (the first may be bad luck)."""

    retry_backoff_s: tuple[float, float] = (0.05, 5.0)
    outage_limit_s: float | None = 1800.0  # None: ride out transient failures for ever
    deterministic_attempts: int = 3

    def decide(self, f: Failure) -> Decision:  # noqa: C901, PLR0911  one ordered rule per failure class, the first that matches decides
        e, why = f.error, describe(f.error)
        if isinstance(e, spout_errors.AccessRefusedError):
            return Decision(FailureClass.PERMANENT, str(e), exit_code=BAD_INPUT, cause=e.kind.lower())
        if isinstance(e, spout_errors.DataLossError) and f.frozen_read and f.same_error_attempts == 1:
            # Retention ran while the txid was frozen: the replay re-checks its ranges first, and
            # then stops (policy fail) or reads what is left (skip).
            return Decision(FailureClass.TRANSIENT, why, retry_in_s=0.0)
        if isinstance(e, FATAL):
            return Decision(FailureClass.PERMANENT, why, exit_code=FAILED, cause=fatal_cause(e))
        if isinstance(e, BadRecordError):  # error policy fail: the message names the record and its error
            return Decision(FailureClass.PERMANENT, f"{e} (errors: fail)", exit_code=FAILED, cause="bad_record")
        if isinstance(e, state_errors.CONFIGURATION):  # raised on the driver, or carried from a task as data
            return Decision(FailureClass.PERMANENT, f"state table: {why}", exit_code=BAD_INPUT, cause="configuration")
        kafka = next((k for err in chain(e) if (k := kafka_error(err)) is not None), None)
        if kafka is not None and kafka.fatal():
            return Decision(FailureClass.PERMANENT, f"kafka client failed for good: {why}", exit_code=FAILED,
                            cause="kafka_fatal")
        refused = refusal(e)
        if refused is not None:
            return Decision(FailureClass.PERMANENT, refused.line, exit_code=BAD_INPUT, cause=refused.cause)
        if kafka is not None and kafka.code() in KAFKA_CONFIG_ERRORS:
            return Decision(FailureClass.PERMANENT, f"kafka configuration: {why}", exit_code=BAD_INPUT,
                            cause="configuration")
        spark_class = deterministic_spark_error(e)
        if spark_class is not None and f.same_error_attempts >= self.deterministic_attempts:
            return Decision(FailureClass.PERMANENT,
                            f"txid {f.txid} failed {f.same_error_attempts} attempts alike with {spark_class} "
                            f"(the transform fails on these records every time): {why}", exit_code=FAILED,
                            cause="deterministic_error")
        if self.outage_limit_s is not None and f.failing_for_s > self.outage_limit_s:
            return Decision(FailureClass.PERMANENT,
                            f"failing for {f.failing_for_s:.0f} s, past the outage limit of {self.outage_limit_s:.0f} s: "
                            f"{why}", exit_code=FAILED, cause="outage_limit")
        return Decision(FailureClass.TRANSIENT, why, retry_in_s=backoff(f.failures_in_a_row, *self.retry_backoff_s))


def fatal_cause(e: BaseException) -> str:
    """The :data:`CAUSES` entry of an error of :data:`FATAL` (``unexpected`` for anything else)."""
    if isinstance(e, state_errors.LeaseLostError | state_errors.LeaseHeldError):
        return "lease_lost"
    if isinstance(e, spout_errors.DataLossError):
        return "data_loss"
    if isinstance(e, state_errors.StaleBatchError):
        return "stale_batch"
    if isinstance(e, app_errors.BadRecordsGoneError):
        return "data_loss"
    if isinstance(e, state_errors.RowRefusedError):  # a row no retry can store
        return "bad_record"
    return "unexpected"


__all__ = [
    "BAD_INPUT",
    "CAUSES",
    "FAILED",
    "FATAL",
    "KAFKA_CONFIG_ERRORS",
    "Decision",
    "Failure",
    "FailureClass",
    "FailurePolicy",
    "fatal_cause",
]
