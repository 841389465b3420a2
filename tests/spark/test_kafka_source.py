"""The JVM read path (:mod:`app.spark.kafka_source`): which pipelines it reads, and that it reads them as the
Python path does, on a real Kafka (librdkafka's mock cluster cannot serve Java's client).

The real-broker tests read the same frozen batch through both paths and compare everything the batch
protocol keeps: records counted, bad records (reason, message, coordinates) and the aggregated rows.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from app.batch import Batch
from app.errors import ReaderRefused
from app.spark import SparkExecutor, connector
from app.spark.bad_records import Excluding, Only, excluded
from app.spark.kafka_source import KafkaSource, Untranslatable, java_properties, planned, refusal
from app.topology import Topology
from spouts.bad_records import BadRecord, Stage
from spouts.kafka import KafkaSpout
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from states import Count
from states.factory import StateFactory
from tests.kafka.fixtures import RealKafkaPeer
from tests.kafka.helpers import config
from tests.spark.helpers import Topic, lines, py4j_calls, word_counts

# -- which pipelines, and with what settings ----------------------------------------------------------------


def test_librdkafka_security_settings_become_the_java_clients() -> None:
    got = java_properties({"security.protocol": "sasl_ssl", "sasl.mechanisms": "scram-sha-512",
                           "sasl.username": "ann", "sasl.password": 'p"w\\d', "ssl.ca.location": "/ca.pem",
                           "fetch.wait.max.ms": "5", "queued.min.messages": "1000"})
    assert got == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="ann" '
                            'password="p\\"w\\\\d";',
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM"}
    plain = java_properties({"sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "x"})
    assert plain["sasl.jaas.config"].startswith("org.apache.kafka.common.security.plain.PlainLoginModule required")


@pytest.mark.parametrize("props", [{"ssl.key.location": "/k.pem"}, {"sasl.mechanism": "GSSAPI", "sasl.username": "u"},
                                   {"enable.ssl.certificate.verification": "false"}])
def test_a_property_without_a_java_equivalent_is_refused_by_name(props: dict[str, str]) -> None:
    with pytest.raises(Untranslatable):
        java_properties(props)
    assert refusal(config("127.0.0.1:1", topics=["t"], properties=props)) is not None


def test_the_jvm_path_reads_bytes_and_string_and_leaves_json_to_python() -> None:
    assert refusal(config("127.0.0.1:1", topics=["t"])) is None
    assert refusal(config("127.0.0.1:1", topics=["t"], key_format="string", value_format="string")) is None
    json_value = config("127.0.0.1:1", topics=["t"], value_format={"type": "json", "fields": {"n": "int"}})
    assert refusal(json_value) == "value_format json decodes in Python"
    assert planned(json_value, "auto") == "python (value_format json decodes in Python)"
    with pytest.raises(ReaderRefused, match="value_format json"):
        planned(json_value, "jvm")


def test_without_the_connector_jars_auto_reads_in_python_and_jvm_names_the_jars(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(connector, "JARS_DIR", tmp_path)
    c = config("127.0.0.1:1", topics=["t"])
    assert planned(c, "auto").startswith("python (") and "make jars" in planned(c, "auto")
    with pytest.raises(ReaderRefused, match=r"spark-sql-kafka-0-10_2.13-.*\.jar.*make jars"):
        planned(c, "jvm")
    assert connector.session_jars() == []


def test_a_pipelines_java_consumers_name_a_group_of_its_settings() -> None:
    """Spark keeps one consumer per group and partition, and refuses other settings under a group it knows: the
    group names the settings too, so two pipelines of one group and other settings never meet in the pool."""
    from app.spark.kafka_source import KafkaSource

    plain = config("127.0.0.1:1", topics=["t"])
    tuned = config("127.0.0.1:1", topics=["t"], properties={"security.protocol": "ssl"})

    def group(c: Any) -> str:
        return KafkaSource.of(c, None, None, group="trident-p").options["kafka.group.id"]

    assert group(plain) == group(plain) and group(plain) != group(tuned)
    assert group(plain).startswith("trident-p-")
    assert "kafka.group.id" not in KafkaSource.of(plain, None, None).options


def test_the_session_has_the_connector(spark: Any) -> None:
    assert connector.missing() == [], "make jars (a prerequisite of make venv) did not fetch the connector"
    assert connector.on_classpath(spark)


def test_the_mock_cluster_is_read_in_python(spark: Any, spark_kafka: Any) -> None:
    """Java's client cannot talk to librdkafka's mock: ``auto`` reads in Python and says why; ``jvm`` refuses."""
    topic = Topic(spark_kafka, partitions=1)
    topology = Topology("source-mock")
    word_counts(lines(topology, topic.spout(topology.name)), StateFactory(backend="sqlite",
                                                                         sqlite_path=str(Path("/nonexistent/x.db"))))
    executor = SparkExecutor(spark, topology, kafka_reader="auto")
    assert executor.source is None and "mock cluster" in executor.reader
    with pytest.raises(ReaderRefused, match="mock cluster"):
        SparkExecutor(spark, topology, kafka_reader="jvm")


def test_the_read_filters_keep_and_leave_out_the_same_records_in_the_jvm(spark: Any) -> None:
    """``Excluding``/``Only`` as Spark columns select what they select from an Arrow batch."""
    rows = [("a", p, o) for p in (0, 1) for o in range(6)] + [("b", 0, o) for o in range(3)]
    batch = pa.RecordBatch.from_pylist([{"topic": t, "partition": p, "offset": o} for t, p, o in rows])
    frame = spark.createDataFrame(rows, "topic string, partition int, offset long")
    picked = frozenset({("a", 0, 2), ("a", 1, 5), ("b", 0, 0), ("c", 3, 1)})
    for filt in (Excluding(picked), Only(picked)):
        arrow = {(r["topic"], r["partition"], r["offset"]) for t, p in (("a", 0), ("a", 1), ("b", 0))
                 for r in filt(PartitionMetadata(t, p, 0, 9, 9, "x"),
                               batch.filter(pa.array([r[:2] == (t, p) for r in rows]))).to_pylist()}
        jvm = {(r[0], r[1], r[2]) for r in frame.filter(filt.predicate()).collect()}
        assert jvm == arrow


def test_a_jvm_read_costs_the_driver_no_more_py4j_calls_than_a_python_read(spark: Any, spark_kafka: Any) -> None:
    """The JVM read's columns and observation are built once per source: building a txid's read then makes about
    as many py4j calls as the Python path's, about 30 (building them every txid made about 470), and a read with no
    bad records to leave out has no filter of them. Building a read asks the brokers nothing."""
    topic = Topic(spark_kafka, partitions=2)
    topology = Topology("source-calls")
    word_counts(lines(topology, topic.spout(topology.name)), StateFactory(backend="sqlite",
                                                                         sqlite_path=str(Path("/nonexistent/x.db"))))
    executor = SparkExecutor(spark, topology)
    spout = topology.spout
    source = KafkaSource.of(spout.config, executor.records_schema, spout.decoder, group="calls")
    batch = _batch(topic.name, {0: 5, 1: 7})
    ranges = list(batch.plan)
    python = [py4j_calls(spark, lambda: executor.read_records(batch, ranges))[0] for _ in range(2)]
    jvm = [py4j_calls(spark, lambda: source.read(spark, ranges, excluded([])))[0] for _ in range(2)]
    assert jvm[1] * 10 < jvm[0] and jvm[1] <= 1.5 * python[1], (jvm, python)  # the first read builds them

    def filters(rows: Any) -> int:
        return str(source.read(spark, ranges, rows)._jdf.queryExecution().analyzed().toString()).count("Filter")

    bad = BadRecord(topic.name, 0, 3, Stage.TRANSFORM, "TRANSFORM_ERROR", "x")
    assert filters(excluded([])) == filters(None) == 1  # the undecodable records' own
    assert filters(excluded([bad])) == 1 and "3" in str(source.read(spark, ranges, excluded([bad]))._jdf
                                                         .queryExecution().analyzed().toString())


# -- on a real Kafka ------------------------------------------------------------------------------------------


def _batch(topic: str, ends: dict[int, int], txid: int = 1, start: int = 0) -> Batch:
    metas = {Partition(topic, p): PartitionMetadata(topic, p, start, end, end - start, "source")
             for p, end in ends.items()}
    return Batch(txid, 1, BatchPlan(txid, metas), frozen=True)


def _rows(executor: SparkExecutor, batch: Batch) -> tuple[int, list[BadRecord], list[dict[str, Any]]]:
    processed = executor.process(batch)
    try:
        frame = processed.sinks[0].frame
        return processed.records, sorted(processed.bad_records, key=repr), sorted((r.asDict() for r in frame.collect()), key=repr)
    finally:
        executor.close()


@pytest.mark.real_kafka
def test_string_records_with_bad_utf8_read_alike_on_both_paths(spark: Any, real_kafka: RealKafkaPeer,
                                                               tmp_path: Path) -> None:
    """Keys and values as ``string``, some not UTF-8, some null, some with headers: both paths count the same
    records, name the same bad records (reason, message, coordinates) and aggregate the same rows."""
    topic = f"source-{uuid.uuid4().hex[:8]}"
    real_kafka.create_topic(topic, 2)
    p = Producer({"bootstrap.servers": real_kafka.bootstrap_servers()})
    for i in range(300):
        value: bytes | None = f"w{i % 7}".encode()
        if i % 41 == 5:
            value = b"bad \xff\xfe value"
        elif i % 53 == 7:
            value = None
        key = b"k\xc3" if i % 67 == 3 else f"k{i % 3}".encode()  # a truncated two-byte character
        p.produce(topic, value=value, key=key, partition=i % 2, headers=[("h", b"1")] if i % 5 == 0 else None)
    p.flush(30)
    topology = Topology("source-utf8")
    spout = KafkaSpout(config(real_kafka.bootstrap_servers(), topics=[topic], key_format="string",
                              value_format="string"), topology.name)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "s.db"))
    (topology.new_stream(spout).each("coalesce(value, '<null>') AS v", "key AS k", "size(headers) AS nheaders",
                                     "timestamp IS NOT NULL AS stamped")
     .group_by("v", "k", "nheaders", "stamped").persistent_aggregate(factory, Count(), output="n", name="pairs"))
    batch = _batch(topic, {0: 150, 1: 150})
    python = _rows(SparkExecutor(spark, topology, kafka_reader="python"), batch)
    jvm_executor = SparkExecutor(spark, topology, kafka_reader="jvm")
    assert jvm_executor.source is not None
    jvm = _rows(jvm_executor, batch)
    assert python == jvm
    records, bad, rows = jvm
    reasons = {b.reason for b in bad}
    assert reasons == {"utf8_invalid"} and {b.stage for b in bad} == {Stage.DECODE}
    expected_bad = {i for i in range(300) if i % 41 == 5 or i % 67 == 3}
    assert sorted((b.partition, b.offset) for b in bad) == sorted((i % 2, i // 2) for i in expected_bad)
    assert records == 300 - len(expected_bad)
    assert sum(r["n"] for r in rows) == records


@pytest.mark.real_kafka
def test_offsets_gone_from_a_frozen_range_fail_as_on_the_python_path(spark: Any, real_kafka: RealKafkaPeer) -> None:
    """Retention ran under a frozen txid: Spark's source fails, the txid is read again in Python, and the error
    is the Python path's (its read task's DataLossError), not a Java one; the replay's re-check of the frozen
    plan then stops or skips by the data-loss policy, as on the Python path."""
    topic = f"source-loss-{uuid.uuid4().hex[:8]}"
    real_kafka.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": real_kafka.bootstrap_servers()})
    for _ in range(40):
        p.produce(topic, value=b"a b", partition=0)
    p.flush(30)
    real_kafka.delete_records(topic, 0, 25)
    topology = Topology("source-loss")
    spout = KafkaSpout(config(real_kafka.bootstrap_servers(), topics=[topic], read_timeout_s=10.0), topology.name)
    word_counts(lines(topology, spout), StateFactory(backend="sqlite", sqlite_path="/tmp/unused-source-loss.db"))
    errors = []
    for reader in ("python", "jvm"):
        executor = SparkExecutor(spark, topology, kafka_reader=reader)
        try:
            with pytest.raises(Exception, match=r"DataLossError: data loss on source-loss-\w+:0: next offset to read "
                                                r"is 0 but the log starts at 25") as info:
                executor.process(_batch(topic, {0: 40}))
            errors.append(type(info.value))
        finally:
            executor.close()
    assert errors[0] is errors[1]
