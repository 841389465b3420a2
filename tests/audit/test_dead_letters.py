"""Dead letters in an audit, on the real servers: a pipeline with a dead-letter topic and planted bad records audits
equal; a dead letter written twice, dead letters in another topic than the config names, and letters deleted from the
topic's start are each found and said.

The pipeline runs through the real coordinator and Spark executor (bad records are found by Spark, as in the
service); the ground truth is the poison records produced here, never what the pipeline wrote.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from app.config import compile_pipeline, load
from app.coordinator.coordinator import Coordinator
from app.metrics import Metrics
from tests.commands.helpers import cli, forget_opened
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce
from tests.spark.test_bad_records import dead_letters

pytestmark = pytest.mark.slow  # Spark in this process

PIPELINE = "sales-audit"
POISON = (b"not json", b'{"store": "x", "amount": "lots"}', b'{"store": "x", "amount": -3}', b'{"amount": 5}')
Coordinates = tuple[str, int, int]
AMOUNT = "CAST(IF(value.amount >= 0, CAST(value.amount AS STRING), 'negative') AS DOUBLE) AS amount"  # -3: bad


def _config(path: Path, bootstrap: str, orders: str, dlq: str, db: Path) -> Path:
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout_s": 5, "read_timeout_s": 10},
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 2}},
        "pipelines": [{
            "id": PIPELINE,
            "spout": {"topics": [orders], "first_poll": "earliest", "discovery_interval_s": 0,
                      "caps": {"per_partition": 20, "per_batch": 40},
                      "value_format": {"type": "json", "fields": {"store": "string", "amount": "double"}}},
            "transforms": [{"map": ["value.store AS store", AMOUNT]}],
            "group_by": ["store"],
            "aggregates": [{"count": {"as": "orders"}}, {"sum": {"field": "amount", "as": "total"}}],
            "state": {"backend": "sqlite", "sqlite_path": str(db), "table": "sales_by_store"},
            "errors": {"dead_letter": {"topic": dlq}},
            "idle_sleep_s": 0.05,
        }],
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _run(path: Path) -> None:
    """The pipeline until idle: the service's coordinator over the service's Spark executor."""
    from prometheus_client import CollectorRegistry

    from app.spark import SparkExecutor, spark_session

    config = load(path)
    compiled = compile_pipeline(config, PIPELINE)
    spark = spark_session(config.spark.master, app_name="trident-tests")
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, compiled.topology, metrics=metrics)
    assert compiled.topology.spout is not None
    coordinator = Coordinator(PIPELINE, compiled.topology.spout, executor, compiled.store(), compiled.coordinator,
                              metrics=metrics)
    try:
        assert coordinator.run_until_idle() > 1
    finally:
        coordinator.close()
        forget_opened()


def _audit(path: Path) -> tuple[int, dict[str, Any], str]:
    r = cli("audit", "--config", str(path), "--pipeline", PIPELINE, "--json")
    return r.code, (json.loads(r.out) if r.out.strip() else {}), r.err


@pytest.fixture
def sales(kafka_peer: KafkaPeer, tmp_path: Path) -> tuple[Path, set[Coordinates], str]:
    """A pipeline run over orders with four poison records: its config, the poison's coordinates, the topic."""
    bootstrap = kafka_peer.bootstrap_servers()
    orders, dlq = unique_topic("orders"), unique_topic("orders-dead")
    kafka_peer.create_topic(orders, 2)
    kafka_peer.create_topic(dlq, 1)
    rng = random.Random(7)
    values = [(i % 2, json.dumps({"store": rng.choice(["a", "b", "c"]), "amount": rng.randint(1, 40)}).encode())
              for i in range(100)]
    for j, v in enumerate(POISON):
        values.insert(10 + 21 * j, (j % 2, v))
    produced = produce(bootstrap, orders, values)
    path = _config(tmp_path / "c.yaml", bootstrap, orders, dlq, tmp_path / "sales.db")
    _run(path)
    return path, {(r.topic, r.partition, r.offset) for r in produced if r.value in POISON}, dlq


def test_dead_letters_audit_equal_and_a_duplicate_or_missing_dead_letter_is_found(
        kafka_peer: KafkaPeer, sales: tuple[Path, set[Coordinates], str], tmp_path: Path) -> None:
    path, poison, dlq = sales
    code, report, err = _audit(path)
    assert code == 0, err
    letters = report["dead_letters"]
    assert (letters["bad_records"], letters["in_topic"], letters["differences"]) == (len(poison), len(poison), 0)
    assert (letters["missing"], letters["twice"], letters["unexpected"]) == ([], [], [])
    assert report["bad_records"]["total"] == len(poison)

    # a dead letter written twice (as a producer outside the protocol would): found, naming the record
    bootstrap = kafka_peer.bootstrap_servers()
    [first, *_] = sorted(dead_letters(bootstrap, dlq), key=lambda m: m.offset())
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(dlq, first.value(), first.key(), headers=first.headers())
    assert producer.flush(30) == 0
    code, report, _ = _audit(path)
    assert code == 5
    letters = report["dead_letters"]
    copied = next(c for c in poison if str(c[2]) == dict(first.headers())["trident.source.offset"].decode()
                  and str(c[1]) == dict(first.headers())["trident.source.partition"].decode())
    assert letters["twice"] == [{"record": list(copied), "copies": 2}]
    assert (letters["in_topic"], letters["missing"], report["differences"]) == (len(poison) + 1, [], 1)
    text = cli("audit", "--config", str(path), "--pipeline", PIPELINE)
    assert text.code == 5
    assert f"record {copied[0]}:{copied[1]}@{copied[2]}: 2 dead letters" in text.out

    # the config now names another (empty) dead-letter topic: every bad record's letter is missing from it
    other = unique_topic("orders-dead-renamed")
    kafka_peer.create_topic(other, 1)
    doc = yaml.safe_load(path.read_text())
    doc["pipelines"][0]["errors"]["dead_letter"]["topic"] = other
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, report, _ = _audit(path)
    assert code == 5
    letters = report["dead_letters"]
    assert sorted(tuple(c) for c in letters["missing"]) == sorted(poison)
    assert letters["in_topic"] == 0
    assert report["differences"] == len(poison)


def test_dead_letters_deleted_from_the_topic_start_are_said_unverifiable(
        kafka_peer: KafkaPeer, sales: tuple[Path, set[Coordinates], str]) -> None:
    path, poison, dlq = sales
    kafka_peer.delete_records(dlq, 0, 2)
    code, report, err = _audit(path)
    assert code == 0, err
    letters = report["dead_letters"]
    assert (letters["in_topic"], letters["unverifiable"], letters["missing"]) == (len(poison) - 2, 2, [])
    assert letters["topic_log_start"] == {"0": 2}
