"""A record the transforms fail on fails no task: the process job runs the transforms in the error-capturing
form and finds every bad record of its txid as it runs, the first dirty txid of a pipeline as every other."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from app.bad_records.error_policy import ErrorPolicy
from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count, Sum
from states.factory import StateFactory
from tests.kafka.helpers import Produced, config, produce
from tests.spark.helpers import coordinator, sqlite_table

ONE_TXID = Caps(per_partition=10_000, per_batch=10_000)
POISON = b'{"store": "oslo", "amount": "lots"}'  # CAST_INVALID_INPUT
AMOUNT = "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT)"


def sales(name: str, topic: str, cluster: Any, factory: StateFactory) -> Topology:
    t = Topology(name, errors=ErrorPolicy.skip())
    (t.new_stream(KafkaSpout(config(cluster.bootstrap_servers(), topics=[topic]), name))
     .map("get_json_object(CAST(value AS STRING), '$.store') AS store", f"{AMOUNT} AS amount")
     .group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    return t


def order(i: int) -> bytes:
    return json.dumps({"store": ("berlin", "paris", "oslo")[i % 3], "amount": i % 50 + 1}).encode()


def truth(produced: list[Produced]) -> dict[str, tuple[int, int]]:
    """Per store, the total amount and the number of orders of the good records (from the input)."""
    out: dict[str, tuple[int, int]] = {}
    for r in produced:
        if r.value == POISON:
            continue
        doc = json.loads(r.value)
        total, n = out.get(doc["store"], (0, 0))
        out[doc["store"]] = (total + int(doc["amount"]), n + 1)
    return out


def stages_of(spark: Any, group: str) -> list[Any]:
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getStageInfo(s) for j in sorted(tracker.getJobIdsForGroup(group))
            for s in tracker.getJobInfo(j).stageIds if tracker.getStageInfo(s) is not None]


def statuses(spark: Any, group: str) -> list[str]:
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getJobInfo(j).status for j in sorted(tracker.getJobIdsForGroup(group))]


def pipeline(spark: Any, spark_kafka: Any, tmp_path: Path, topic: str, prefix: str) -> tuple[str, Metrics, Any]:
    """The sales pipeline over ``topic`` into SQLite under ``tmp_path``: its name, metrics and coordinator."""
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    t = sales(name, topic, spark_kafka, factory)
    coord = coordinator(t, SparkExecutor(spark, t, metrics=metrics), factory.txstate_store(name), caps=ONE_TXID,
                        metrics=metrics)
    return name, metrics, coord


def test_a_record_error_fails_no_task_attempt(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """One order of 400 does not CAST, in the pipeline's first txid. No task attempt of the txid's jobs fails
    (the capturing run, the read that names the error; the commit runs none: the run collected the result of
    a txid this small); the state equals the truth over the good
    orders and the bad one is counted once."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(topic, 2)
    values = [(i % 2, POISON if i == 301 else order(i)) for i in range(400)]  # the poison is in partition 1
    produced = produce(spark_kafka.bootstrap_servers(), topic, values)
    name, metrics, coord = pipeline(spark, spark_kafka, tmp_path, topic, "one-job")
    try:
        assert coord.run_until_idle() == 1
    finally:
        coord.close()
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == truth(produced)
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason="CAST_INVALID_INPUT",
                         action="skip") == 1
    group = f"{name}:txid-1"
    assert statuses(spark, group) == ["SUCCEEDED"] * 2, statuses(spark, group)  # capturing run, naming read
    assert sum(s.numFailedTasks for s in stages_of(spark, group)) == 0, stages_of(spark, group)


def test_dirty_and_clean_txids_fail_no_job(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Four txids of 300 orders: the first and the second with bad orders, the last two clean. No job of any
    fails; a clean txid is one job (its process job collects a result this small: the commit runs none), a
    dirty one two (the read naming the errors). The
    state equals the truth over the good orders; each bad one is counted once."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(topic, 2)
    name, metrics, coord = pipeline(spark, spark_kafka, tmp_path, topic, "capture")
    produced: list[Produced] = []
    try:
        for txid, bad in ((1, {17, 210}), (2, {5, 99, 250}), (3, set()), (4, set())):
            values = [(i % 2, POISON if i in bad else order(i)) for i in range(300)]
            produced += produce(spark_kafka.bootstrap_servers(), topic, values)
            assert coord.run_until_idle() == 1, txid
    finally:
        coord.close()
    assert sqlite_table(tmp_path / "state.db", "sales", ["store"], ["total", "n"]) == truth(produced)
    assert metrics.value("trident_bad_records_total", pipeline=name, stage="transform", reason="CAST_INVALID_INPUT",
                         action="skip") == 5
    for txid, jobs in ((1, 2), (2, 2), (3, 1), (4, 1)):
        assert statuses(spark, f"{name}:txid-{txid}") == ["SUCCEEDED"] * jobs, txid
