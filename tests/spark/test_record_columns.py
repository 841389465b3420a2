"""A txid's read tasks build only the record columns its sinks use: the others cost nothing, and results are the
same (the state equals the producer's truth); a transform that looks at its columns gets all of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as sf

from app.spark import GLOBAL_KEY_COLUMN, SparkExecutor
from app.spark.record_columns import referenced_columns
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count, Latest, combiner
from states.factory import StateFactory
from tests.kafka.helpers import produce
from tests.spark.helpers import Topic, coordinator, expected_words, lines, sqlite_table, word_counts

COORDINATES = ("topic", "partition", "offset")
ALL = (*COORDINATES, "timestamp", "key", "value", "headers")


def by_key(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    return topology.new_stream(spout).map("CAST(key AS STRING) AS k").group_by("k").persistent_aggregate(factory, Count(), output="n")


def latest_text(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    return (lines(topology, spout).each("get_json_object(json, '$.user') AS user")
            .group_by("user").persistent_aggregate(factory, [Agg(Latest(), "last", "json")]))


def folded(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    """A custom combiner: a Python fold on executors, after the transforms."""
    return (topology.new_stream(spout).each("length(value) > 3 AS long").group_by("long")
            .persistent_aggregate(factory, [Agg(combiner("ones", lambda v: 1, int.__add__, 0), "ones")]))


def whole_record(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    return topology.new_stream(spout).map("md5(to_json(struct(*))) AS h").group_by("h").persistent_aggregate(factory, Count(), output="n")


def looks_at_its_columns(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    """A function transform whose output depends on how many columns it is given (without reading them)."""
    counted = topology.new_stream(spout).apply(lambda df: df.select(sf.lit(len(df.columns)).cast("string").alias("width"), "*"))
    return counted.group_by("width").persistent_aggregate(factory, Count(), output="n")


def one_per_record(topology: Topology, spout: KafkaSpout, factory: StateFactory) -> Any:
    """A global count of one constant row per record (through a generator): its plans use no record column."""
    return (topology.new_stream(spout).map("explode(array(1)) AS one")
            .persistent_aggregate(factory, Count(), output="n", name="records"))


@pytest.mark.parametrize(("sink", "read", "planned"), [
    # a generator's keys are checked on its aggregate: the planned run names no record
    (lambda t, s, f: word_counts(lines(t, s), f), (*COORDINATES, "value"), ("value",)),
    (by_key, (*COORDINATES, "key"), None),  # one row per record: the run captures errors, naming records
    (latest_text, (*COORDINATES, "timestamp", "value"), None),  # a latest value is placed by its record's timestamp
    (folded, (*COORDINATES, "value"), None),
    (whole_record, ALL, None),
    (looks_at_its_columns, ALL, ("offset",)),  # it is given every column still (null): its plan uses none
    (one_per_record, COORDINATES, ("offset",)),  # a record batch of no columns would have no rows
], ids=["word-count", "by-key", "latest", "fold", "whole-record", "looks-at-columns", "no-column"])
def test_the_reads_build_only_the_columns_the_sinks_use(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                       sink: Callable[[Topology, KafkaSpout, StateFactory], Any],
                                                       read: tuple[str, ...], planned: tuple[str, ...] | None) -> None:
    topic = Topic(spark_kafka, partitions=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("record-columns")
    sink(topology, topic.spout(topology.name), factory)
    executor = SparkExecutor(spark, topology)
    try:
        assert tuple(executor.records_schema.names) == read
        assert executor.reads.columns == (None if read == ALL else read)
        assert executor.reads.planned == planned
    finally:
        executor.close()


def test_a_plan_names_the_read_columns_it_uses(spark: Any) -> None:
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("topic", StringType()), StructField("offset", LongType()),
                         StructField("key", BinaryType()), StructField("value", BinaryType())])
    records = spark.range(0, 1, 1, 1).mapInArrow(lambda it: iter(()), schema)
    assert referenced_columns(records.filter("key IS NOT NULL").groupBy("topic").count(), records) == {"topic", "key"}
    assert referenced_columns(records.selectExpr("*").select("offset"), records) == {"offset"}
    assert referenced_columns(records, records) == {"topic", "offset", "key", "value"}  # its output is used
    folded = records.select("topic", "value").mapInArrow(lambda it: it, "topic string, value binary")
    assert referenced_columns(folded.groupBy("topic").count(), records) == {"topic", "value"}  # a Python step's input


def test_a_word_count_of_records_with_keys_headers_and_timestamps_reads_values_only_and_counts_each_once(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Records carry keys, headers and timestamps the sink never reads: the txids read the value alone (and the
    coordinates) and the counts equal the truth computed from what was produced."""
    topic = Topic(spark_kafka, partitions=2)
    docs = [(i % 2, json.dumps({"user": "u", "amount": 1, "text": f"w{i % 5} w{i % 3}"}).encode()) for i in range(120)]
    topic.produced += produce(spark_kafka.bootstrap_servers(), topic.name, docs, key=b"some-key",
                              headers=[("trace", b"abc"), ("empty", None)])
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("value-only")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=Caps(per_partition=25, per_batch=40))
    try:
        assert executor.reads.columns == (*COORDINATES, "value")
        assert executor.reads.planned == ("value",)
        assert coord.run_until_idle() >= 3
    finally:
        coord.close()
    assert sqlite_table(tmp_path / "state.db", "word_counts", ["word"], ["count"]) == expected_words(topic.produced)


def test_a_run_that_uses_no_record_column_reads_offsets_and_counts_every_record_once(
        spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A global count whose plans use no record column reads the offsets alone (a batch of no columns has no
    rows); over several txids the count equals the records produced."""
    topic = Topic(spark_kafka, partitions=2)
    topic.produced += produce(spark_kafka.bootstrap_servers(), topic.name, [(i % 2, b"x") for i in range(150)])
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("no-column")
    one_per_record(topology, topic.spout(topology.name), factory)
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=Caps(per_partition=25, per_batch=40))
    try:
        assert executor.reads.planned == ("offset",)
        assert coord.run_until_idle() >= 3
    finally:
        coord.close()
    assert sqlite_table(tmp_path / "state.db", "records", [GLOBAL_KEY_COLUMN], ["n"]) == {"$global": len(topic.produced)}
