"""The JVM read path: a txid's frozen ranges read by Spark's own Kafka source, no Python per record.

The Python path (:class:`app.spark.tasks.ReadRanges`) reads each range in a Python worker with
librdkafka, builds Arrow batches and hands every record to the JVM. Here Spark's ``kafka`` source
reads the same ranges in batch mode, in the JVM where the aggregation runs anyway:

- ``assign`` with exact ``startingOffsets``/``endingOffsets`` per partition from the frozen plan (a
  replay reads the same records), the spout's ``isolation.level`` (``read_committed`` by default:
  records of aborted transactions are skipped, control records never delivered);
  ``failOnDataLoss`` on: offsets gone from a frozen range fail the read, and the executor then reads
  the txid through the Python path, which names the error the failure policy knows
  (:class:`spouts.errors.DataLossError`, an unavailable partition, a refused topic).
- The records come out in the Python path's schema: ``string`` keys and values are cast in the JVM;
  a value that is not UTF-8 is a bad record, left out of the rows. One observation of the read
  (no job of its own) counts the records kept and lists the bad ones with their raw bytes; the driver
  decodes those through the spout's own decoder, so reasons, messages and coordinates are exactly
  the Python path's and dead letters stay exactly once.
- JSON and the Schema Registry formats keep the Python read: their bad-record reasons and messages
  come from Python's and Arrow's parsers, which Spark's ``from_json`` does not reproduce.

The connection properties are librdkafka's (the spout's ``properties``); :func:`java_properties`
translates the security ones (SASL PLAIN/SCRAM, TLS with a PEM CA) and drops those that only tune
librdkafka. Anything else makes this path refuse the pipeline (:func:`refusal`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from app.errors import ReaderRefused
from app.spark.jvm import gateway, java_frame
from spouts.bad_records import BadRecord
from spouts.kafka.arrow import SCHEMA as RAW_SCHEMA
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.formats.decode import BatchDecoder
from spouts.kafka.formats.spec import FormatType
from spouts.metadata import PartitionMetadata

#: librdkafka properties that only tune librdkafka's own fetching, buffers and logs (the Java client keeps
#: its defaults for those).
_LIBRDKAFKA_TUNING = re.compile(
    r"^(fetch\.|queued\.|socket\.|statistics\.|log\.|log_|reconnect\.|retry\.|topic\.metadata\.|metadata\.|api\.version"
    r"|broker\.version\.fallback$|client\.id$|debug$|receive\.message\.max\.bytes$|message\.max\.bytes$"
    r"|max\.partition\.fetch\.bytes$|session\.timeout\.ms$|heartbeat\.interval\.ms$|request\.timeout\.ms$)")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: The formats this path decodes in the JVM.
JVM_FORMATS = frozenset({FormatType.BYTES, FormatType.STRING})
#: The observation of a read: records kept, and the bad ones (raw) as JSON.
READ_OBSERVATION = "kafka_read"


class Untranslatable(ValueError):
    """A librdkafka property the Java client has no equivalent for here."""


def java_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The Java client's settings for librdkafka's ``props`` (raises :class:`Untranslatable`)."""
    rest = dict(props)
    user, password = rest.pop("sasl.username", None), rest.pop("sasl.password", None)
    mechanism = (rest.pop("sasl.mechanism", None) or rest.pop("sasl.mechanisms", None) or "").upper()
    out: dict[str, str] = {}
    for name, value in rest.items():
        if name == "security.protocol":
            out[name] = value.upper()
        elif name == "ssl.ca.location":
            out.update({"ssl.truststore.location": value, "ssl.truststore.type": "PEM"})
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = "" if value.lower() == "none" else value
        elif not _LIBRDKAFKA_TUNING.match(name):
            raise Untranslatable(f"librdkafka property {name!r} has no Java client equivalent here")
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if user is not None or password is not None:
        module = _LOGIN_MODULES.get(mechanism or "PLAIN")
        if module is None:
            raise Untranslatable(f"sasl.mechanism {mechanism!r} with a username has no Java login module here")
        out["sasl.jaas.config"] = f'{module} required username="{_quoted(user)}" password="{_quoted(password)}";'
    return out


def _quoted(text: str | None) -> str:
    return (text or "").replace("\\", "\\\\").replace('"', '\\"')


def refusal(config: KafkaSpoutConfig) -> str | None:
    """Why this path cannot read a spout of ``config`` (None: it can)."""
    for part, fmt in (("key", config.key_format), ("value", config.value_format)):
        if fmt.type not in JVM_FORMATS:
            return f"{part}_format {fmt.type.value} decodes in Python"
    try:
        java_properties(config.properties)
    except Untranslatable as e:
        return str(e)
    return None


@dataclass(frozen=True)
class _ReadExpressions:
    """The Spark columns that turn Kafka rows into records: the records' columns, the test of a bad record, and the
    observation of a read (unresolved expressions: one set serves every read of a source)."""

    columns: tuple[Any, ...]
    bad: Any
    raw: Any  # the raw record, as the observation lists a bad one
    keep: Any  # ~bad
    observed: tuple[Any, Any]  # the observation when every good record is kept

    @classmethod
    def of(cls, schema: Any, fmt: Callable[[str], FormatType]) -> _ReadExpressions:
        from pyspark.sql import functions as F

        bad = F.lit(False)
        columns = []
        for f in schema.fields:
            c = F.col(f.name)
            if f.name in ("key", "value") and fmt(f.name) is FormatType.STRING:
                c = c.cast("string")
                bad = bad | (F.col(f.name).isNotNull() & ~F.is_valid_utf8(c))
            elif f.name == "timestamp":
                c = F.when(F.col("timestampType") >= 0, c)  # -1: the record has none (the Python path's null)
            elif f.name == "headers":
                c = F.coalesce(c, F.array())
            columns.append(c.cast(f.dataType).alias(f.name))
        raw = F.struct(*(F.col(n) for n in ("topic", "partition", "offset", "key", "value")))
        return cls(tuple(columns), bad, raw, ~bad, _observation(~bad, bad, raw))

    def observation(self, keep: Any) -> tuple[Any, Any]:
        """The observation of a read that keeps ``keep``."""
        return _observation(keep, self.bad, self.raw)


def _observation(keep: Any, bad: Any, raw: Any) -> tuple[Any, Any]:
    """Records kept, and the bad ones (``raw``, as JSON)."""
    from pyspark.sql import functions as F

    return F.count(F.when(keep, 1)).alias("records"), F.to_json(F.collect_list(F.when(bad, raw))).alias("bad")


@dataclass(frozen=True)
class KafkaSource:
    """Reads a spout's ranges with Spark's Kafka source, as records in the spout's schema (driver side)."""

    config: KafkaSpoutConfig
    schema: Any  # the records' StructType (the Python path's)
    decoder: BatchDecoder | None  # the spout's: names the bad records the JVM found
    options: dict[str, str] = field(default_factory=dict)
    _built: list[_ReadExpressions] = field(default_factory=list, compare=False, repr=False)  # see _expressions

    @classmethod
    def of(cls, config: KafkaSpoutConfig, schema: Any, decoder: BatchDecoder | None,
           group: str | None = None) -> KafkaSource:
        """The source of a spout of ``config``; ValueError when :func:`refusal` refuses it. ``group``: the prefix of
        the consumer group its Java consumers name (they never join it nor commit); None: a fresh one per read, as
        Spark does."""
        why = refusal(config)
        if why is not None:
            raise ValueError(why)
        options = {"kafka.bootstrap.servers": config.bootstrap_servers,
                   "kafka.isolation.level": config.isolation_level,
                   "includeHeaders": "true", "failOnDataLoss": "true",
                   # Java's default (500 ms) holds a task's offset query behind its consumer's long poll at the
                   # log end: a 1-record range took 0.5 s more
                   "kafka.fetch.max.wait.ms": "10",
                   # Java's default (500) makes Spark poll 100 times for a 50,000-record range: 400,000 records on 8
                   # partitions were read in 1.27 s with it, 0.71 s with this
                   "kafka.max.poll.records": "10000"}
        options.update({f"kafka.{k}": v for k, v in java_properties(config.properties).items()})
        if group is not None:  # Spark's consumer pool refuses two settings under one group: the settings name it too
            digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
            options["kafka.group.id"] = f"{group}-{digest}"
        return cls(config, schema, decoder, options)

    def read(self, spark: Any, ranges: Sequence[PartitionMetadata], rows: Any = None) -> Any:
        """The records of ``ranges`` (each read once, in offset order), without the bad ones; ``rows`` (a filter of
        :mod:`app.spark.bad_records` with a ``predicate``) keeps some of them. Observed as
        :data:`READ_OBSERVATION` (:meth:`taken`)."""
        assign: dict[str, list[int]] = {}
        start: dict[str, dict[str, int]] = {}
        end: dict[str, dict[str, int]] = {}
        for m in ranges:
            assign.setdefault(m.topic, []).append(m.partition)
            start.setdefault(m.topic, {})[str(m.partition)] = m.first_offset
            end.setdefault(m.topic, {})[str(m.partition)] = m.next_offset
        reader = spark.read.format("kafka").options(**self.options)
        raw = (reader.option("assign", json.dumps(assign)).option("startingOffsets", json.dumps(start))
               .option("endingOffsets", json.dumps(end)).load())
        read = self._expressions()
        if rows is None:
            return raw.observe(READ_OBSERVATION, *read.observed).filter(read.keep).select(*read.columns)
        keep = read.keep & rows.predicate()
        return raw.observe(READ_OBSERVATION, *read.observation(keep)).filter(keep).select(*read.columns)

    def _expressions(self) -> _ReadExpressions:
        """The read's columns, built once (each is several py4j round trips: about 60 ms a txid when built every
        time on a loaded machine)."""
        if not self._built:
            self._built.append(_ReadExpressions.of(self.schema, self._format))
        return self._built[0]

    def _format(self, part: str) -> FormatType:
        return (self.config.key_format if part == "key" else self.config.value_format).type

    def taken(self, frame: Any) -> tuple[int, list[BadRecord]]:
        """The records a materialised (or collected) ``frame`` over :meth:`read` kept, and the bad ones, named
        by the spout's decoder exactly as the Python path names them."""
        got = java_frame(frame).queryExecution().observedMetrics().get(READ_OBSERVATION)
        if got.isEmpty():
            raise RuntimeError(f"Spark did not report observation {READ_OBSERVATION} of the read")
        row = got.get()
        return int(row.getLong(0)), self._named(json.loads(row.getString(1) or "[]"))

    def _named(self, bad: list[dict[str, Any]]) -> list[BadRecord]:
        if not bad or self.decoder is None:
            return []
        found: list[BadRecord] = []
        seen: set[tuple[str, int, int]] = set()
        for (topic, partition), group in _by_partition(bad).items():
            group = [d for d in group if (topic, partition, d["offset"]) not in seen]  # a recomputed task adds twice
            seen.update((topic, partition, d["offset"]) for d in group)
            raw = pa.RecordBatch.from_pylist([{
                "topic": topic, "partition": partition, "offset": d["offset"], "timestamp": None,
                "key": _bytes(d.get("key")), "value": _bytes(d.get("value")), "headers": []} for d in group],
                schema=RAW_SCHEMA)
            self.decoder.decode(raw, found.append)
        return found


def _by_partition(bad: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for d in sorted(bad, key=lambda d: (d["topic"], d["partition"], d["offset"])):
        out.setdefault((d["topic"], int(d["partition"])), []).append({**d, "offset": int(d["offset"])})
    return out


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)  # to_json writes binary as base64


#: ``spark.kafka_reader``'s values.
READERS = ("auto", "jvm", "python")
#: librdkafka's mock cluster names itself so; Java's client cannot talk to it (it answers no DescribeCluster).
_MOCK_CLUSTER = "mockCluster"


#: What the start-up log and ``validate`` say of a pipeline the JVM path reads.
_JVM = "jvm (Spark's Kafka source)"


def choose(spark: Any, spout: Any, schema: Any, reader: str) -> tuple[KafkaSource | None, str]:
    """The source ``reader`` (:data:`READERS`) asks for ``spout`` (None: the Python path), and which path reads it
    and why, for the start-up log and ``validate``. ``jvm`` where this path cannot read is :class:`~app.errors.ReaderRefused`."""
    said = _path(reader, lambda: why_not(spark, spout), _JVM)
    if said != _JVM:
        return None, said
    # a group of the pipeline's own: Spark's executors keep one consumer per partition from txid to txid (its pool is
    # keyed by group and partition) instead of making one per read; they never join it nor commit
    source = KafkaSource.of(spout.config, schema, spout.decoder, group=spout.config.group(spout.topology_id))
    _quiet_group_warning(spark)
    return source, said


def planned(config: KafkaSpoutConfig, reader: str) -> str:
    """Which path a pipeline of ``config`` reads with, as far as is known without a Spark session or the
    brokers (``validate``); :class:`~app.errors.ReaderRefused` for ``jvm`` where it cannot read."""
    from app.spark import connector

    jvm = f"{_JVM}, python where the brokers are librdkafka's mock cluster" if reader == "auto" else _JVM
    return _path(reader, lambda: refusal(config) or (connector.missing_message() if connector.missing() else None),
                 jvm)


def _path(reader: str, why_not: Callable[[], str | None], jvm: str) -> str:
    """Which path ``reader`` reads with: ``jvm`` where ``why_not`` finds nothing against it, else python and why;
    :class:`~app.errors.ReaderRefused` for ``jvm`` where it cannot read, or an unknown reader."""
    if reader not in READERS:
        raise ReaderRefused(f"spark.kafka_reader must be one of {', '.join(READERS)}, not {reader!r}")
    if reader == "python":
        return "python (spark.kafka_reader: python)"
    why = why_not()
    if why is None:
        return jvm
    if reader == "jvm":
        raise ReaderRefused(f"spark.kafka_reader jvm: {why}")
    return f"python ({why})"


def _quiet_group_warning(spark: Any) -> None:
    """Spark warns on every read that names a group (concurrent streaming queries of one group would share its
    offsets); these reads assign their partitions and never commit, so the warning says nothing here."""
    jvm = gateway(spark)
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.kafka010.KafkaSourceProvider", jvm.org.apache.logging.log4j.Level.ERROR)


def why_not(spark: Any, spout: Any) -> str | None:
    """Why Spark's Kafka source cannot read ``spout`` here (None: it can)."""
    from app.spark import connector
    from spouts.kafka.spout import KafkaSpout

    if not isinstance(spout, KafkaSpout):
        return f"the spout is a {type(spout).__name__}, not a Kafka spout"
    if not connector.on_classpath(spark):
        return connector.missing_message()
    why = refusal(spout.config)
    if why is None and cluster_id(spout.config).startswith(_MOCK_CLUSTER):
        why = "the brokers are librdkafka's mock cluster, which Java's Kafka client cannot talk to"
    return why


def cluster_id(config: KafkaSpoutConfig) -> str:
    """The brokers' cluster id ('' when they do not answer within the spout's request timeout)."""
    from confluent_kafka import Consumer, KafkaException

    try:
        consumer = Consumer(config.consumer_config("reader-choice", role="plan"))
    except KafkaException:
        return ""
    try:
        return consumer.list_topics(timeout=config.request_timeout_s).cluster_id or ""
    except KafkaException:
        return ""
    finally:
        consumer.close()


def read_failed(e: BaseException) -> bool:
    """Whether a failed process job failed in Spark's Kafka source or Kafka's Java client (by the error's text:
    the Java exception reaches Python as a message)."""
    text = str(e)
    return "org.apache.kafka" in text or "kafka010" in text


def first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)[:300]
