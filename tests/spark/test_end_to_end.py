"""Kafka (mock cluster) -> Coordinator + SparkExecutor -> SQLite / Cassandra (CQL test server).

Every test checks every stored key against a ground truth computed in plain Python from the
records the test produced, reading the tables directly (sqlite3, the CQL server's rows).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.query import query, stored_spec
from app.spark import GLOBAL_KEY_COLUMN, SparkExecutor
from app.topology.batch import Batch
from app.topology.topology import Agg, Topology
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.planner import Caps
from states import Count, Sum, combiner
from states.factory import StateFactory
from tests.spark.helpers import (
    Topic,
    amounts,
    coordinator,
    expected_amounts,
    expected_words,
    lines,
    sqlite_table,
    word_counts,
)

CAPS = Caps(per_partition=120, per_batch=300)


def test_word_count_and_amounts_into_sqlite(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Two keyed aggregations over several batches and a second run: every word count and every
    user's (sum, max) in the SQLite tables equals the truth; records and keys reach the metrics."""
    topic = Topic(spark_kafka)
    topic.produce(600, seed=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("e2e-sqlite")
    stream = lines(topology, topic.spout(topology.name))
    words, sums = word_counts(stream, factory), amounts(stream, factory)
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, topology, metrics=metrics)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS, metrics=metrics)
    try:
        assert coord.run_until_idle() >= 2
        topic.produce(300, seed=2)
        assert coord.run_until_idle() >= 1
    finally:
        coord.close()
        executor.close()
    db = tmp_path / "state.db"
    assert sqlite_table(db, "word_counts", ["word"], ["count"]) == expected_words(topic.produced)
    assert sqlite_table(db, "amounts", ["user"], ["total", "largest"]) == expected_amounts(topic.produced)
    assert metrics.value("trident_records_total", pipeline=topology.name) == 900
    for kind in ("read", "cas"):  # counted in the worker processes, added to the driver's metrics
        assert metrics.value("trident_state_requests_total", pipeline=topology.name, backend="sqlite", kind=kind) > 0
    assert query(words, ["fox", ("émigré",), "never"]) == [expected_words(topic.produced)["fox"],
                                                              expected_words(topic.produced)["émigré"], None]
    assert query(sums, ["u3"]) == [expected_amounts(topic.produced)["u3"]]
    assert stored_spec(words) == executor.spec("word_counts")  # what a fresh process would query with


def test_word_count_and_amounts_into_cassandra(spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """The same pipeline into Cassandra (the CQL test server): typed tables whose rows match the truth."""
    from states.cassandra import CassandraSettings

    server = cql_server_session
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace="spark_e2e",
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 backoff_initial_s=0.02, backoff_max_s=0.5, reconnect_base_s=0.05,
                                 reconnect_max_s=0.5)
    topic = Topic(spark_kafka)
    topic.produce(500, seed=3)
    factory = StateFactory(backend="cassandra", cassandra=settings)
    topology = Topology("e2e-cassandra")
    stream = lines(topology, topic.spout(topology.name))
    words_sink = word_counts(stream, factory)
    amounts_sink = amounts(stream, factory)
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    words = {r["word"]: r["count"] for r in server.rows("spark_e2e", "word_counts")}
    assert words == expected_words(topic.produced)
    sums = {r["user"]: (r["total"], r["largest"]) for r in server.rows("spark_e2e", "amounts")}
    assert sums == expected_amounts(topic.produced)
    assert {r["txid"] for r in server.rows("spark_e2e", "amounts")} <= set(range(1, coord.committed_txid + 1))
    assert stored_spec(words_sink) == executor.spec("word_counts")
    assert stored_spec(amounts_sink) == executor.spec("amounts")
    assert query(amounts_sink, ["u1"]) == [expected_amounts(topic.produced)["u1"]]


def _apply_sums(state: Any, rows: list[dict[str, Any]]) -> None:
    """A partition_persist updater: adds each row's amount to its user's stored total."""
    totals: Counter[str] = Counter()
    for r in rows:
        totals[r["user"]] += r["amount"]
    users = sorted(totals)
    state.multi_update([(u,) for u in users], [lambda v, n=totals[u]: (v or 0) + n for u in users])


def test_global_aggregates_custom_combiner_and_partition_persist(spark: Any, spark_kafka: Any,
                                                                 tmp_path: Path) -> None:
    """A global aggregate (count, sum) in one row, a custom combiner (sum of squares, Python fold)
    per key, and a partition_persist sink whose updater sees all rows of a key in one task."""
    topic = Topic(spark_kafka)
    topic.produce(450, seed=4)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("e2e-global")
    typed = lines(topology, topic.spout(topology.name)).each(
        "get_json_object(json, '$.user') AS user", "CAST(get_json_object(json, '$.amount') AS BIGINT) AS amount")
    total = typed.persistent_aggregate(factory, [Agg(Count(), "records"), Agg(Sum(), "amount", "amount")],
                                       name="totals")
    squares = combiner("squares", lambda x: x * x, lambda a, b: a + b, 0)
    typed.group_by("user").persistent_aggregate(factory, [Agg(squares, "squares", "amount"), Agg(Count(), "n")],
                                                name="user_squares")
    typed.partition_persist(factory, ["user"], ["amount"], _apply_sums, name="persisted_sums")
    executor = SparkExecutor(spark, topology)
    assert [c.mode for c in executor.sinks] == ["builtin", "fold", "rows"]
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    docs = [json.loads(r.value) for r in topic.produced]
    db = tmp_path / "state.db"
    assert sqlite_table(db, "totals", [GLOBAL_KEY_COLUMN], ["records", "amount"]) == {
        "$global": (len(docs), sum(d["amount"] for d in docs))}
    assert query(total) == (len(docs), sum(d["amount"] for d in docs))
    expected_squares: dict[str, tuple[int, int]] = {}
    for d in docs:
        s, n = expected_squares.get(d["user"], (0, 0))
        expected_squares[d["user"]] = (s + d["amount"] ** 2, n + 1)
    assert sqlite_table(db, "user_squares", ["user"], ["squares", "n"]) == expected_squares
    assert sqlite_table(db, "persisted_sums", ["user"], ["amount"]) == {
        u: s for u, (s, _) in expected_amounts(topic.produced).items()}


def test_a_plan_without_records_runs_no_spark_job(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Empty ranges only: process returns zero records at once and commit writes nothing."""
    topic = Topic(spark_kafka, partitions=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("e2e-empty")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    executor = SparkExecutor(spark, topology)
    meta = PartitionMetadata(topic.name, 0, 5, 5, 0, topology.name)
    batch = Batch(1, 1, BatchPlan(1, {Partition(topic.name, 0): meta}), frozen=True)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(None)
    processed = executor.process(batch)
    stats = executor.commit(batch, processed)
    assert (processed.records, stats.records, stats.keys_updated) == (0, 0, 0)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup(None) == jobs


def test_the_executor_says_how_its_read_tasks_read(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                   caplog: Any) -> None:
    """At start-up, once, on the driver: the reader the read tasks take for the columns the plans use (the word
    count never asks for headers, so the native reader where it is built)."""
    topic = Topic(spark_kafka, partitions=1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("e2e-reader")
    word_counts(lines(topology, topic.spout(topology.name)), factory)
    with caplog.at_level("INFO", logger="app.spark.batch_executor"):
        SparkExecutor(spark, topology)
    said = [r.getMessage() for r in caplog.records if "read through" in r.getMessage()]
    assert said == [("topology e2e-reader: read tasks read through the native reader (librdkafka's message "
                     "batches copied into Arrow columns in C)")], said
