"""The Spark plumbing's smaller promises: masters, compiled specs, refusals, a stale batch (whatever its message)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.failures import spark_fatal as fatal
from app.spark import SparkExecutor, TopologyCompileError
from app.spark.reading import pack_ranges
from app.spark.session import default_conf, local_master
from app.topology.batch import Batch
from app.topology.topology import Agg, Topology
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from states import Count, Max, StaleBatchError, combiner
from states import errors as state_errors
from states.errors import LeaseHeldError, LeaseLostError
from states.factory import StateFactory
from states.spec import Column, StateKind
from tests.spark.faults import Reworded
from tests.spark.helpers import Topic, lines, word_counts


@pytest.mark.parametrize(("given", "used"), [
    ("local", "local[1,4]"), ("local[*]", "local[*,4]"), ("local[3]", "local[3,4]"), ("local[2,7]", "local[2,7]"),
    ("spark://host:7077", "spark://host:7077"), ("k8s://https://api:6443", "k8s://https://api:6443"),
])
def test_local_masters_get_task_retries_and_cluster_masters_pass_through(given: str, used: str) -> None:
    """A local master without an attempt count gets 4 attempts per task; other masters are unchanged."""
    assert local_master(given) == used


def test_default_conf_runs_workers_on_this_interpreter() -> None:
    """Workers and driver run the service's interpreter; Arrow is on; the UI is off."""
    import sys

    conf = default_conf("local[*,4]")
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.ui.enabled"] == "false"


@pytest.mark.parametrize(("master", "cores"), [("local[3,4]", 3), ("local", 1), ("local[*]", os.cpu_count())])
def test_a_local_master_shuffles_into_a_partition_per_core(master: str, cores: int) -> None:
    """One shuffle partition, hence one commit task, per core: more tasks than cores only add Python task
    round trips (and split the commit into more, smaller requests windows)."""
    conf = default_conf(master)
    assert conf["spark.sql.shuffle.partitions"] == conf["spark.default.parallelism"] == str(cores)


def test_a_cluster_master_keeps_spark_own_partitioning() -> None:
    conf = default_conf("spark://host:7077")
    assert "spark.sql.shuffle.partitions" not in conf
    assert "spark.default.parallelism" not in conf


def _sqlite(tmp_path: Path, kind: StateKind = StateKind.OPAQUE) -> StateFactory:
    return StateFactory(kind=kind, backend="sqlite", sqlite_path=str(tmp_path / "state.db"))


def test_specs_are_typed_from_the_stream(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Key columns take the group-by fields' types, values the aggregates' (a custom combiner without
    input is a bigint; max of a timestamp is a timestamp); state_kinds lists every sink's kind."""
    topic = Topic(spark_kafka, partitions=1)
    topology = Topology("units-specs")
    stream = topology.new_stream(topic.spout(topology.name)).each("partition * 2 AS part2", "length(value) > 3 AS long")
    sink = stream.group_by("topic", "part2", "long").persistent_aggregate(
        _sqlite(tmp_path), [Agg(Max(), "latest", "timestamp"), Agg(combiner("ones", lambda v: 1, int.__add__, 0),
                                                                      "ones")], name="typed")
    executor = SparkExecutor(spark, topology)
    spec = executor.spec(sink.name)
    assert spec.key == (Column("topic", "text"), Column("part2", "bigint"), Column("long", "boolean"))
    assert spec.value == (Column("latest", "timestamp"), Column("ones", "bigint"))
    assert executor.state_kinds() == [StateKind.OPAQUE]


def test_bad_topologies_are_refused_at_construction(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """An unknown group-by column, a type no state column holds, and the memory backend are refused
    before any batch runs, with the sink named."""
    topic = Topic(spark_kafka, partitions=1)
    missing = Topology("units-missing")
    lines(missing, topic.spout(missing.name)).group_by("nope").persistent_aggregate(_sqlite(tmp_path), Count(),
                                                                                    name="t1")
    with pytest.raises(TopologyCompileError, match="'nope' is not a column"):
        SparkExecutor(spark, missing)
    decimal = Topology("units-decimal")
    lines(decimal, topic.spout(decimal.name)).each("CAST(1 AS DECIMAL(10, 2)) AS d").group_by("d") \
        .persistent_aggregate(_sqlite(tmp_path), Count(), name="t2")
    with pytest.raises(TopologyCompileError, match="decimal"):
        SparkExecutor(spark, decimal)
    bad_sql = Topology("units-sql")
    word_counts(lines(bad_sql, topic.spout(bad_sql.name)).filter("no_such_column > 1"), _sqlite(tmp_path))
    with pytest.raises(TopologyCompileError, match=r"sink 'word_counts'.*no_such_column"):
        SparkExecutor(spark, bad_sql)
    memory = Topology("units-memory")
    word_counts(lines(memory, topic.spout(memory.name)), StateFactory(backend="memory"))
    with pytest.raises(ValueError, match="memory backend"):
        SparkExecutor(spark, memory)


def test_a_batch_behind_the_state_raises_stale_batch_error(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """An executor task that finds a newer txid stored raises StaleBatchError; it reaches the
    coordinator as StaleBatchError (which stops it) rather than as a generic Spark error."""
    topic = Topic(spark_kafka, partitions=1)
    topic.produce(20)
    topology = Topology("units-stale")
    word_counts(lines(topology, topic.spout(topology.name)), _sqlite(tmp_path))
    executor = SparkExecutor(spark, topology)
    meta = PartitionMetadata(topic.name, 0, 0, 20, 20, topology.name)

    def batch(txid: int) -> Batch:
        return Batch(txid, 1, BatchPlan(txid, {Partition(topic.name, 0): meta}), frozen=True)

    newer = batch(2)
    executor.commit(newer, executor.process(newer))
    older = batch(1)
    with pytest.raises(StaleBatchError) as info:
        executor.commit(older, executor.process(older))
    assert (info.value.batch_txid, info.value.stored_txid) == (1, 2)


def test_a_stale_batch_crosses_spark_as_data_not_as_its_message(spark: Any, spark_kafka: Any,
                                                                 tmp_path: Path) -> None:
    """A commit task's StaleBatchError whose message says nothing parsable still reaches the driver as
    StaleBatchError with its fields: the fatal stop does not depend on the wording."""
    topic = Topic(spark_kafka, partitions=1)
    topic.produce(20)
    topology = Topology("units-reworded")
    word_counts(lines(topology, topic.spout(topology.name)), _sqlite(tmp_path))
    executor = SparkExecutor(spark, topology, faults=Reworded(1))
    meta = PartitionMetadata(topic.name, 0, 0, 20, 20, topology.name)
    batch = Batch(1, 1, BatchPlan(1, {Partition(topic.name, 0): meta}), frozen=True)
    with pytest.raises(StaleBatchError) as info:
        executor.commit(batch, executor.process(batch))
    assert (info.value.batch_txid, info.value.stored_txid, info.value.key) == (1, 6, ("fox",))


def test_a_table_of_another_shape_crosses_spark_as_its_class(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """A commit task that finds the table with other columns stops with SchemaMismatchError on the driver
    (carried as data, so the failure policy decides by its type: a configuration error, exit 2)."""
    import sqlite3

    topic = Topic(spark_kafka, partitions=1)
    topic.produce(20)
    topology = Topology("units-shape")
    factory = _sqlite(tmp_path)
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("CREATE TABLE word_counts (name TEXT PRIMARY KEY, total TEXT)")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    meta = PartitionMetadata(topic.name, 0, 0, 20, 20, topology.name)
    batch = Batch(1, 1, BatchPlan(1, {Partition(topic.name, 0): meta}), frozen=True)
    with pytest.raises(state_errors.SchemaMismatchError, match="word_counts"):
        executor.commit(batch, executor.process(batch))


@pytest.mark.parametrize("error", [StaleBatchError(3, 4, ("a", 1)), StaleBatchError(3, 4),
                                   LeaseLostError("t", 2, 3), LeaseHeldError("t", "pod-1", 7),
                                   state_errors.SchemaMismatchError("table t has no column n"),
                                   state_errors.InvalidIdentifierError("invalid table name 'select'"),
                                   state_errors.CommitProtocolError("multi_update outside begin_commit/commit")],
                         ids=repr)
def test_fatal_records_round_trip_without_the_message(error: Exception) -> None:
    """The record a task writes rebuilds the same fatal state error from its fields, whatever its message."""
    fields = dict(vars(error))
    error.args = ("reworded",)
    again = fatal.decode(fatal.encode(error))
    assert type(again) is type(error)
    assert vars(again) == fields


def test_only_fatal_and_configuration_state_errors_are_carried() -> None:
    """Every fatal state error and every configuration one is carried; any other error is refused (it fails
    the task as usual)."""
    assert set(fatal.CARRIED) == set(state_errors.FATAL) | set(state_errors.CONFIGURATION)
    with pytest.raises(TypeError):
        fatal.encode(ValueError("not carried"))
    with pytest.raises(TypeError):
        fatal.encode(ValueError("not carried"))


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(0, 100_000), min_size=1, max_size=40), tasks=st.integers(1, 12))
def test_packed_ranges_are_each_read_once_in_balanced_groups(counts: list[int], tasks: int) -> None:
    """Every range lands in exactly one of at most ``tasks`` groups (never an empty one); the heaviest group
    exceeds the lightest by one range at most; the same plan packs the same way whatever its order."""
    ranges = [PartitionMetadata("t", p, 0, max(n, 1), n, "x") for p, n in enumerate(counts)]
    groups = pack_ranges(ranges, tasks)
    assert len(groups) == min(tasks, len(ranges))
    assert all(groups)
    assert sorted((m for g in groups for m in g), key=lambda m: m.partition) == ranges
    weights = [sum(max(1, m.record_count) for m in g) for g in groups]
    assert max(weights) - min(weights) <= max(max(1, n) for n in counts)
    assert pack_ranges(list(reversed(ranges)), tasks) == groups
