"""Finding a txid's bad records on Spark, the same way on every replay.

* **decode**: the spout reports a record it cannot decode to ``on_bad`` and leaves it out; read tasks
  add ``{range: bad records}`` to an accumulator (:class:`SeenBadRecords`), so a recomputed task adds
  the same entry again and the set stays exact.
* **aggregate**: a row with a null group-by key, or one the state cannot store (an empty or too long
  Cassandra partition key: :mod:`states.limits`), is left out by the process job itself and named by
  its hidden source column: no error, and the commit never sends a key the database would refuse (it
  would be retried as an outage). A sink of Spark's own aggregates checks the aggregate's rows, once per
  key (:func:`split_bad_groups`), and finds the records of a bad key by one more job, only in a txid
  that has one (:func:`bad_key_records`); other sinks observe every row as the job runs
  (:func:`split_null_keys`, :func:`null_key_records`).
* **transform**: a transform's expression that fails on a record (an ANSI ``CAST``, a division by
  zero, a ``raise_error``): where SQL transforms can run in the error-capturing form
  (:mod:`app.spark.capture`, :func:`split_transform_errors`) the process job always runs them so, and
  the failed rows are left out and named by their source column as it runs: no task fails. A sink
  with a Python function transform or a generator, or a null group-by key of a sink whose rows lost
  their source column (:func:`guard_keys` makes that fail), is handled by bisection: when the error
  is deterministic (:func:`record_error`: a replay of the same records raises it again), the txid's
  records are bisected by source coordinates (:func:`isolate`): each probe runs the transforms on a slice of the records; a slice that passes
  holds no bad record, a failing slice of one record is one. The txid then runs without them.
  A transient error (a broker away) is never mistaken for a bad record: it propagates and the txid
  is retried whole.

Bisection finds exactly the records on which the transforms fail by themselves, whatever order it
probes in, provided the transforms are deterministic and work record by record (a ``filter``,
``map`` or ``each``; a DataFrame function that looks across records is bisected as far as it can be).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam

from app.failures.error_text import describe
from app.failures.spark_errors import deterministic_spark_error, raised_message
from app.spark.jvm import gateway, java_frame
from spouts.bad_records import BadRecord, Stage
from spouts.metadata import PartitionMetadata
from states.limits import KeyLimits, KeyProblem

NULL_KEY = "NULL_KEY"  # the reason of a record whose group-by key is null
_NULL_KEY_TEXT = "TRIDENT_NULL_KEY"
_BAD_KEY_TEXT = "TRIDENT_BAD_KEY"  # + " <KeyProblem>": a key the state cannot store (guard_keys)
Coordinates = tuple[str, int, int]
#: A probe: run the transforms on these sub-ranges; the record error it met, or None.
Probe = Callable[[Sequence[PartitionMetadata]], "RecordError | None"]


class SeenBadRecords(AccumulatorParam[dict[Any, tuple[BadRecord, ...]]]):
    """Merges ``{range: bad records}``; a range read twice (a recomputed task) keeps one entry."""

    def zero(self, value: dict[Any, tuple[BadRecord, ...]]) -> dict[Any, tuple[BadRecord, ...]]:
        return {}

    def addInPlace(self, a: dict[Any, tuple[BadRecord, ...]],  # noqa: N802  the name AccumulatorParam gives it
                   b: dict[Any, tuple[BadRecord, ...]]) -> dict[Any, tuple[BadRecord, ...]]:
        a.update(b)
        return a


@dataclass(frozen=True, slots=True)
class RecordError:
    """A deterministic error of the transforms: the stage it belongs to, its class and its text."""

    stage: Stage
    reason: str
    message: str


def record_error(e: BaseException) -> RecordError | None:
    """``e`` as a record error if a replay of the same records raises it again; None if it may be transient."""
    raised = raised_message(e)  # what guard_keys' raise_error said, read from the error's parameters
    if raised is not None and raised.startswith(_NULL_KEY_TEXT):
        return RecordError(Stage.AGGREGATE, NULL_KEY, f"null group-by key ({raised[len(_NULL_KEY_TEXT):].strip(' :')})")
    if raised is not None and raised.startswith(_BAD_KEY_TEXT):  # our own raise_error: "<prefix> <reason>: <message>"
        reason, _, message = raised[len(_BAD_KEY_TEXT):].strip().partition(": ")
        return RecordError(Stage.AGGREGATE, KeyProblem(reason).value, message)
    name = deterministic_spark_error(e)
    return None if name is None else RecordError(Stage.TRANSFORM, name, describe(e)[:1000])


def guard_keys(df: Any, keys: Sequence[str], sink: str, limits: KeyLimits | None = None) -> Any:
    """``df``, failing on a row whose key columns hold a null (no state can store that key), or a key the
    state refuses (``limits``)."""
    if not keys:
        return df
    from pyspark.sql import functions as sf

    null = sf.col(keys[0]).isNull()
    for k in keys[1:]:
        null = null | sf.col(k).isNull()
    check = sf.when(null, sf.raise_error(sf.lit(f"{_NULL_KEY_TEXT}: sink {sink}, key {', '.join(keys)}")))
    if limits is not None:
        for problem, refused in _refusals(limits):
            text = f"{_BAD_KEY_TEXT} {problem.value}: {key_message(problem, keys, sink, limits)}"
            check = check.when(refused, sf.raise_error(sf.lit(text)))
    return df.filter(check.otherwise(sf.lit(True)))


def null_key_message(keys: Sequence[str], sink: str) -> str:
    return f"null group-by key (sink {sink}, key {', '.join(keys)})"


def key_message(problem: KeyProblem, keys: Sequence[str], sink: str, limits: KeyLimits) -> str:
    """Why the state refuses a record's group-by key, for people (sink, key columns, table, limit)."""
    return f"{limits.message(problem)} (sink {sink}, key {', '.join(keys)})"


def _refusals(limits: KeyLimits) -> list[tuple[KeyProblem, Any]]:
    """Per problem, the Spark column that is true for a (non-null) key ``limits`` refuses: the same rule as
    :meth:`KeyLimits.problem`, evaluated in the process job."""
    from pyspark.sql import functions as sf

    out: list[tuple[KeyProblem, Any]] = []
    if limits.non_empty:
        empty = sf.lit(False)
        for n in limits.non_empty:
            empty = empty | (sf.length(sf.col(n)) == 0)  # characters of a string, bytes of a binary
        out.append((KeyProblem.EMPTY, empty))
    size: Any = sf.lit(0)
    for n, t in limits.columns:
        fixed = limits.size_of(t)
        size = size + (sf.lit(fixed) if fixed is not None else sf.octet_length(sf.col(n))) + sf.lit(limits.overhead)
    out.append((KeyProblem.TOO_LONG, size > sf.lit(limits.max_bytes)))
    return out


def split_null_keys(df: Any, keys: Sequence[str], sink: str, source: str,
                    limits: KeyLimits | None = None) -> tuple[Any, str]:
    """``df`` without its rows whose key columns hold a null or (``limits``) a key the state refuses, and the
    name of the observation that lists their source records (column ``source``) and why, as the job
    computing ``df`` runs: no job of its own.

    Spark's observed metrics are aggregated from the tasks of the job (a recomputed task may add its
    rows twice; :func:`null_key_records` keeps one entry per record).
    """
    from pyspark.sql import functions as sf

    reason = key_reason(keys, limits)
    name = f"null_keys_{sink}"
    found = sf.to_json(sf.collect_list(sf.when(reason.isNotNull(), sf.struct(sf.col(source).alias("source"),
                                                                        reason.alias("reason"))))).alias("records")
    return df.observe(name, found).filter(reason.isNull()), name


def key_reason(keys: Sequence[str], limits: KeyLimits | None = None) -> Any:
    """A column naming why a row's key cannot be stored (:data:`NULL_KEY`, or a :class:`KeyProblem` of
    ``limits``), null for a key the state takes. A function of the key columns alone."""
    from pyspark.sql import functions as sf

    null = sf.col(keys[0]).isNull()
    for k in keys[1:]:
        null = null | sf.col(k).isNull()
    reason = sf.when(null, sf.lit(NULL_KEY))
    for problem, refused in _refusals(limits) if limits is not None else []:
        reason = reason.when(refused, sf.lit(problem.value))
    return reason


def split_bad_groups(result: Any, keys: Sequence[str], sink: str, limits: KeyLimits | None = None) -> tuple[Any, str]:
    """An aggregate ``result`` (a row per key) without the keys the state cannot store, and the name of the
    observation counting them as the job runs.

    The reason is a function of the key alone, so a key's rows are all good or all bad: checking the
    aggregate's rows finds what checking every record's rows would, at the cost of one check per key
    (an observation on every record's row costs about a fifth of the process job's CPU).
    """
    from pyspark.sql import functions as sf

    reason = key_reason(keys, limits)
    name = f"bad_keys_{sink}"
    return result.observe(name, sf.count_if(reason.isNotNull()).alias("keys")).filter(reason.isNull()), name


def observed_count(df: Any, name: str) -> int:
    """The count observation ``name`` collected while ``df`` (materialised or collected) ran."""
    return int(_observation(df, name).getLong(0))


def bad_key_records(rows: Any, keys: Sequence[str], sink: str, source: str,
                    limits: KeyLimits | None = None) -> list[BadRecord]:
    """The records behind ``rows`` whose keys the state cannot store (a job of its own: run only when the
    aggregate met such a key), one entry each, in order."""
    from pyspark.sql import functions as sf

    reason = key_reason(keys, limits)
    got = rows.filter(reason.isNotNull()).select(sf.col(source).alias("source"), reason.alias("reason")).collect()
    return _key_records({(r["source"]["topic"], int(r["source"]["partition"]), int(r["source"]["offset"])):
                         r["reason"] for r in got}, keys, sink, limits)


def split_transform_errors(df: Any, sink: str, source: str, error: str) -> tuple[Any, str]:
    """``df`` (in the capturing form, :mod:`app.spark.capture`) without its failed rows, and the name of
    the observation that lists their source records and failed expressions, in the same job."""
    from pyspark.sql import functions as sf

    name = f"transform_errors_{sink}"
    failed = sf.col(error).isNotNull()
    found = sf.to_json(sf.collect_list(sf.when(failed, sf.struct(sf.col(source).alias("source"),
                                                             sf.col(error).alias("expr"))))).alias("records")
    return df.observe(name, found).filter(~failed).drop(error), name


def observed(df: Any, name: str) -> list[Any]:
    """The JSON list observation ``name`` collected while ``df`` (materialised or collected) ran."""
    import json

    return list(json.loads(_observation(df, name).getString(0) or "[]"))


def _observation(df: Any, name: str) -> Any:
    """The row of observation ``name`` in ``df``'s executed plan (a JVM Row); an error if Spark has none."""
    got = java_frame(df).queryExecution().observedMetrics().get(name)
    if got.isEmpty():
        msg = f"Spark did not report observation {name} of the batch"
        raise RuntimeError(msg)
    return got.get()


def null_key_records(frame: Any, name: str, keys: Sequence[str], sink: str,
                     limits: KeyLimits | None = None) -> list[BadRecord]:
    """The records observation ``name`` found in the (materialised) ``frame``, one entry each, in order."""
    found: dict[Coordinates, str] = {}
    for d in observed(frame, name):
        s = d["source"]
        found[(s["topic"], int(s["partition"]), int(s["offset"]))] = d["reason"]
    return _key_records(found, keys, sink, limits)


def _key_records(found: dict[Coordinates, str], keys: Sequence[str], sink: str,
                 limits: KeyLimits | None) -> list[BadRecord]:
    """Bad records of the aggregate stage, from ``{coordinates: reason}``, in order."""
    out = []
    for (t, p, o), reason in sorted(found.items()):
        message = null_key_message(keys, sink) if reason == NULL_KEY or limits is None else \
            key_message(KeyProblem(reason), keys, sink, limits)
        out.append(BadRecord(t, p, o, Stage.AGGREGATE, reason, message))
    return out


def failed_expressions(df: Any, name: str) -> dict[Coordinates, int]:
    """Per record observation ``name`` found, the index of the first expression that failed on it."""
    out: dict[Coordinates, int] = {}
    for d in observed(df, name):
        s = d["source"]
        c = (s["topic"], int(s["partition"]), int(s["offset"]))
        out[c] = min(out.get(c, d["expr"]), d["expr"])
    return out


#: Loggers that print a stack trace for every failed task or captured error; quiet while probing.
_NOISY_JVM = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
              "org.apache.spark.scheduler.TaskSchedulerImpl")
_NOISY_PYTHON = ("SQLQueryContextLogger", "py4j", "pyspark")


@contextmanager
def quiet(spark: Any) -> Iterator[None]:
    """Spark's per-task error logging off while a probe fails on purpose (the probe reports the error)."""
    jvm = gateway(spark)
    configurator, level = jvm.org.apache.logging.log4j.core.config.Configurator, jvm.org.apache.logging.log4j.Level
    manager = jvm.org.apache.logging.log4j.LogManager
    saved = [(name, manager.getLogger(name).getLevel()) for name in _NOISY_JVM]
    # only loggers that exist: PySpark makes "SQLQueryContextLogger" a logger of its own class, which a plain
    # one created here first would replace for the whole process (its error calls pass keywords of that class)
    existing = [logging.Logger.manager.loggerDict.get(name) for name in _NOISY_PYTHON]
    saved_py = [(logger, logger.level) for logger in existing if isinstance(logger, logging.Logger)]
    for name in _NOISY_JVM:
        configurator.setLevel(name, level.OFF)
    for logger, _ in saved_py:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, lvl in saved:
            configurator.setLevel(name, lvl)
        for logger, py_level in saved_py:
            logger.setLevel(py_level)


def force(df: Any) -> None:
    """Evaluate every column of every row of ``df`` (a probe: nothing is kept)."""
    df.write.format("noop").mode("overwrite").save()


def isolate(coordinates: Sequence[Coordinates], probe: Probe, topology_id: str, *,
            first_only: bool = False) -> list[BadRecord]:
    """The records of ``coordinates`` (sorted) on which ``probe`` fails by themselves, by bisection.

    ``first_only``: stop at the first one found (the lowest coordinates).
    """
    found: list[BadRecord] = []

    def visit(lo: int, hi: int, known: RecordError | None) -> bool:
        """Find the bad records of ``coordinates[lo:hi]`` (``known``: it failed so, it was probed whole)."""
        if lo >= hi or (first_only and found):
            return False
        before = len(found)
        err = known if known is not None else probe(sub_ranges(coordinates[lo:hi], topology_id))
        if err is None:
            return False
        if hi - lo == 1:
            t, p, o = coordinates[lo]
            found.append(BadRecord(t, p, o, err.stage, err.reason, err.message))
            return True
        mid = (lo + hi) // 2
        left = visit(lo, mid, None)
        if left or hi - mid == 1:
            visit(mid, hi, None)
        else:  # the left half is good, so the failure is in the right half: split it without probing it whole
            right_mid = (mid + hi) // 2
            visit(mid, right_mid, None)
            visit(right_mid, hi, None)
        return len(found) > before

    visit(0, len(coordinates), None)
    return found


def sub_ranges(coordinates: Sequence[Coordinates], topology_id: str) -> list[PartitionMetadata]:
    """Per partition, the offsets from the first to the last of ``coordinates`` (sorted) as ranges to read."""
    spans: dict[tuple[str, int], list[int]] = {}
    for t, p, o in coordinates:
        span = spans.setdefault((t, p), [o, o])
        span[0], span[1] = min(span[0], o), max(span[1], o)
    return [PartitionMetadata(t, p, lo, hi + 1, hi + 1 - lo, topology_id) for (t, p), (lo, hi) in spans.items()]


@dataclass(frozen=True)
class LeaveOutFilter:
    """A read task's row filter: leaves out the records at ``offsets`` (picklable, for executors)."""

    offsets: frozenset[Coordinates]

    def __call__(self, meta: PartitionMetadata, rb: pa.RecordBatch) -> pa.RecordBatch:
        mine = [o for t, p, o in self.offsets if t == meta.topic and p == meta.partition]
        if not mine:
            return rb
        import pyarrow.compute as pc

        return rb.filter(pc.invert(pc.is_in(rb.column("offset"), value_set=pa.array(mine, rb.schema.field("offset").type))))


@dataclass(frozen=True)
class KeepOnlyFilter:
    """A read task's row filter: keeps only the records at ``offsets`` (picklable, for executors)."""

    offsets: frozenset[Coordinates]

    def __call__(self, meta: PartitionMetadata, rb: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow.compute as pc

        mine = [o for t, p, o in self.offsets if t == meta.topic and p == meta.partition]
        return rb.filter(pc.is_in(rb.column("offset"), value_set=pa.array(mine, rb.schema.field("offset").type)))


def keep_only_filter(records: Iterable[Coordinates]) -> KeepOnlyFilter:
    """A read's filter keeping only ``records``."""
    return KeepOnlyFilter(frozenset(records))


def leave_out_filter(bad: Iterable[BadRecord]) -> LeaveOutFilter | None:
    """A read's filter leaving ``bad`` out; None when there is nothing to leave out (no filter at all)."""
    offsets = frozenset((b.topic, b.partition, b.offset) for b in bad)
    return LeaveOutFilter(offsets) if offsets else None

