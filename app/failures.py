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
  match) and for a refusal (:func:`refusal`: credentials, a missing ACL or grant, an untrusted
  certificate, told in one line naming the server, the principal and the setting to check); exit 1 for everything else (data loss under ``fail``, a batch behind the
  state, a lost lease, a deterministic error of the user's transform that fails every attempt of a
  txid alike, a poison record under ``fail``).

The exit codes equal the commands' (:mod:`app.commands.common`, which imports the config and so
cannot be imported here) and are listed in docs/configuration.md.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app import errors as app_errors
from app.loop import backoff
from spouts import errors as spout_errors
from spouts.bad_records import BadRecordError
from spouts.kafka.access import AUTHENTICATION, AUTHORIZATION, REFUSALS, TLS
from states import errors as state_errors

FAILED = 1  # a permanent failure at run time (the message names the object)
BAD_INPUT = 2  # configuration that only shows at run time, or a start-up error (the message names it)

#: Never retried: a replay would only repeat them (the layers' own lists).
FATAL: tuple[type[BaseException], ...] = spout_errors.FATAL + state_errors.FATAL + app_errors.FATAL

#: Why a pipeline stopped for good, few enough to be a metric label (``trident_pipeline_failures_total``):
#: ``unexpected`` is an error outside the policy (a bug, or a start-up step of the pipeline).
CAUSES = ("lease_lost", "data_loss", "stale_batch", "bad_record", "configuration", "authentication",
          "authorization", "tls", "kafka_fatal", "deterministic_error", "outage_limit", "unexpected")

#: Spark SQL error classes that a replay of the same records raises again (ANSI mode, bad casts,
#: arithmetic): the same input gives the same error on every attempt.
DETERMINISTIC_SPARK_ERRORS = frozenset({
    "CAST_INVALID_INPUT", "CAST_OVERFLOW", "DIVIDE_BY_ZERO", "ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE",
    "INVALID_ARRAY_INDEX", "INVALID_ARRAY_INDEX_IN_ELEMENT_AT", "MALFORMED_RECORD_IN_PARSING",
    "CANNOT_PARSE_TIMESTAMP", "INVALID_FRACTION_OF_SECOND", "DATATYPE_MISMATCH", "USER_RAISED_EXCEPTION",
})

#: librdkafka errors that no retry can mend (KafkaError names): bad settings (refusals: :func:`refusal`).
KAFKA_CONFIG_ERRORS = frozenset({"_INVALID_ARG", "_UNKNOWN_PROTOCOL", "_NOT_IMPLEMENTED"})



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

    def decide(self, f: Failure) -> Decision:
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
        kafka = _kafka_error_name(e)
        if kafka == "_FATAL":
            return Decision(FailureClass.PERMANENT, f"kafka client failed for good: {why}", exit_code=FAILED,
                            cause="kafka_fatal")
        refused = refusal(e)
        if refused is not None:
            return Decision(FailureClass.PERMANENT, refused.line, exit_code=BAD_INPUT, cause=refused.cause)
        if kafka in KAFKA_CONFIG_ERRORS:
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


def describe(e: BaseException) -> str:
    """``Type: message`` on one line, cut to a readable length. A message carrying a Python traceback (a failed
    Spark task's carries its worker's) keeps its first line and the traceback's own error line, not the frames."""
    text = _condensed(str(e))
    return f"{type(e).__name__}: {text[:400]}{'...' if len(text) > 400 else ''}"


_TRACEBACK = "Traceback (most recent call last):"


def _condensed(text: str) -> str:
    """``text`` on one line; of a traceback in it, only the error line after its frames (for people to read)."""
    if _TRACEBACK not in text:
        return " ".join(text.split())
    head, _, frames = text.partition(_TRACEBACK)
    first = head.strip().splitlines()[0] if head.strip() else ""
    error = next((line for line in frames.splitlines()[1:] if line.strip() and not line[0].isspace()), "")
    return " ".join(f"{first} {error}".split())


def error_key(e: BaseException) -> str:
    """What makes two failures "the same error": the Spark error class if there is one, else the type."""
    return deterministic_spark_error(e) or _spark_error_class(e) or type(e).__name__


def deterministic_spark_error(e: BaseException) -> str | None:
    """The Spark error class of ``e`` (or of what it wraps) if replaying the same records repeats it."""
    name = _spark_error_class(e)
    return name if name in DETERMINISTIC_SPARK_ERRORS else None


def _spark_error_class(e: BaseException) -> str | None:
    """Spark's error condition of ``e``, of what it wraps, or of the JVM exceptions behind them: read through
    their own accessors (``getCondition``), never from their text."""
    for err in _chain(e):
        for source in (err, *_java_causes(err)):
            name = _condition(source)
            if name in DETERMINISTIC_SPARK_ERRORS:
                return name
    return None


def raised_message(e: BaseException) -> str | None:
    """The message a Spark SQL ``raise_error`` raised in ``e`` (or in what it wraps), read from the error's
    parameters (``USER_RAISED_EXCEPTION``'s ``errorMessage``); None for any other error."""
    for err in _chain(e):
        for source in (err, *_java_causes(err)):
            if _condition(source) != "USER_RAISED_EXCEPTION":
                continue
            try:
                message = source.getMessageParameters().get("errorMessage")
            except Exception:  # noqa: BLE001 - no parameters to read: not the error sought
                continue
            if isinstance(message, str):
                return message
    return None


def _condition(source: Any) -> str | None:
    for accessor in ("getCondition", "getErrorClass"):  # getErrorClass: before Spark 4
        get = getattr(source, accessor, None)
        try:
            name = get() if callable(get) else None
        except Exception:  # noqa: BLE001 - a JVM exception that is not a SparkThrowable has no condition
            name = None
        if isinstance(name, str) and name:
            return name.split(".")[0]
    return None


def _java_causes(error: BaseException) -> list[Any]:
    """The JVM exception behind a PySpark error raised on the driver, and its causes (empty for any other)."""
    # PySpark keeps the Java exception it captured in ``_origin``; py4j's Py4JJavaError (a direct call on a
    # JVM object, e.g. an RDD count of a query's plan) in ``java_exception``
    cause = getattr(error, "_origin", None) or getattr(error, "java_exception", None)
    out: list[Any] = []
    while cause is not None and len(out) < 32:
        out.append(cause)
        try:
            cause = cause.getCause()
        except Exception:  # noqa: BLE001 - a JVM gone or a foreign object: no more causes to read
            break
    return out


def _kafka_error_name(e: BaseException) -> str | None:
    for err in _chain(e):
        arg = err.args[0] if err.args else None
        name = getattr(arg, "name", None)
        if type(err).__name__ == "KafkaException" and callable(name):
            if getattr(arg, "fatal", lambda: False)():
                return "_FATAL"
            return str(name())
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A server refused the service for good: ``kind`` is authentication, authorization or TLS; ``line`` names
    the server, the principal and the setting to check, on one line without secrets."""

    kind: str
    line: str

    @property
    def cause(self) -> str:
        return self.kind.lower()


#: What an operator checks for each kind of Cassandra refusal.
CASSANDRA_SETTINGS = {
    AUTHENTICATION: "cassandra.username and cassandra.password (TRIDENT_CASSANDRA_PASSWORD)",
    AUTHORIZATION: "the grants of the role (docs/operations.md lists the ones the service needs)",
    TLS: "cassandra.tls.ca_file (the CA that signed the node's certificate) and cassandra.tls.check_hostname",
}


def refusal(e: BaseException, *, cassandra_role: str | None = None) -> Refusal | None:
    """The refusal ``e`` is or wraps, by type: Kafka's (:class:`~spouts.errors.AccessRefusedError`, or a
    ``KafkaException`` whose code is one), the DataStax driver's (``AuthenticationFailed``, ``Unauthorized``,
    a TLS error, alone or as every host's error of a ``NoHostAvailable``); None when it is none of them.
    ``cassandra_role``: the configured user, named in the line."""
    for err in _chain(e):
        if isinstance(err, spout_errors.AccessRefusedError):
            return Refusal(err.kind, str(err))
        arg: Any = err.args[0] if err.args else None
        if type(err).__name__ == "KafkaException" and callable(getattr(arg, "code", None)):
            kind = REFUSALS.get(arg.code())
            if kind is not None:
                return Refusal(kind, f"{kind} refused by Kafka: {' '.join(arg.str().split())}")
        found = _cassandra_refusal(err, cassandra_role)
        if found is not None:
            return found
    return None


def _cassandra_kind(err: BaseException) -> str | None:
    name = type(err).__name__
    if name == "AuthenticationFailed":
        return AUTHENTICATION
    if name == "Unauthorized":
        return AUTHORIZATION
    if isinstance(err, ssl.SSLError):
        return TLS
    return None


def _cassandra_refusal(err: BaseException, role: str | None) -> Refusal | None:
    who = f" for role {role}" if role else ""
    nested = getattr(err, "errors", None)  # NoHostAvailable: {host: error}
    if type(err).__name__ == "NoHostAvailable" and isinstance(nested, dict) and nested:
        kinds = {_cassandra_kind(v) for v in nested.values() if isinstance(v, BaseException)}
        if len(kinds) == 1 and None not in kinds and len(nested) == sum(isinstance(v, BaseException)
                                                                        for v in nested.values()):
            kind = kinds.pop()
            assert kind is not None
            hosts = ", ".join(str(h) for h in nested)
            detail = " ".join(str(next(iter(nested.values()))).split())
            return Refusal(kind, f"{kind} refused by Cassandra at {hosts}{who}: {detail[:300]}; "
                                 f"check {CASSANDRA_SETTINGS[kind]}")
        return None
    kind = _cassandra_kind(err)
    if kind is None or kind == TLS:  # a bare TLS error could be any server's: only a NoHostAvailable names it
        return None
    detail = " ".join(str(err).split())
    return Refusal(kind, f"{kind} refused by Cassandra{who}: {detail[:300]}; check {CASSANDRA_SETTINGS[kind]}")


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__
