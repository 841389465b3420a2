"""Bad records on Spark: a poison record at each stage (decode, transform, aggregate) under each error
policy; the rest of the txid commits and the state equals the ground truth over the good records."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from prometheus_client import CollectorRegistry

from app.bad_records.dead_letters import coordinates_of
from app.bad_records.error_policy import ErrorPolicy
from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Agg, Topology
from spouts.bad_records import BadRecord, BadRecordError, OnBad, Stage
from spouts.kafka import KafkaSpout
from spouts.metadata import PartitionMetadata
from spouts.planner import Caps
from states import Count, Sum
from states.factory import StateFactory
from tests.kafka.helpers import Produced, config, produce
from tests.spark.helpers import coordinator, sqlite_table

CAPS = Caps(per_partition=30, per_batch=60)
USERS = ("ann", "bob", "cy", "dee")


class JsonCheckingSpout(KafkaSpout):
    """A Kafka spout that reports a value which is not JSON to ``on_bad`` (stage decode) and leaves it out."""

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = 65_536,
                   on_bad: OnBad | None = None, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        for rb in super().read_arrow(meta, batch_size, on_bad, columns):
            keep = []
            for i, value in enumerate(rb.column("value").to_pylist()):
                try:
                    json.loads(value)
                    keep.append(True)
                except ValueError as e:
                    keep.append(False)
                    if on_bad is not None:
                        on_bad(BadRecord(meta.topic, meta.partition, rb.column("offset")[i].as_py(), Stage.DECODE,
                                         "json_invalid", str(e)))
            yield rb.filter(pa.array(keep))


POISON = {  # value -> (stage, reason)
    b"{not json": (Stage.DECODE, "json_invalid"),
    b'{"user": "bob", "amount": "lots"}': (Stage.TRANSFORM, "CAST_INVALID_INPUT"),
    b'{"amount": 5}': (Stage.AGGREGATE, "NULL_KEY"),
}


@dataclass
class Sales:
    """A topic of sales records, a few of them poison, with the ground truth over the good ones."""

    produced: list[Produced]
    poison: dict[tuple[str, int, int], tuple[Stage, str]]
    topic: str

    def truth(self) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for r in self.produced:
            if (r.topic, r.partition, r.offset) in self.poison:
                continue
            doc = json.loads(r.value)
            total, n = out.get(doc["user"], (0, 0))
            out[doc["user"]] = (total + int(doc["amount"]), n + 1)
        return out


def sales(cluster: Any, n: int = 240, partitions: int = 3, seed: int = 3,
          poison: tuple[bytes, ...] = tuple(POISON)) -> Sales:
    topic = f"sales-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions)
    rng = random.Random(seed)
    values = [(i % partitions, json.dumps({"user": rng.choice(USERS), "amount": str(rng.randint(1, 99))}).encode())
              for i in range(n)]
    for j, p in enumerate(poison):  # spread over partitions and txids
        values.insert(37 + j * 61, ((j + 1) % partitions, p))
    produced = produce(cluster.bootstrap_servers(), topic, values)
    bad = {(r.topic, r.partition, r.offset): POISON[r.value] for r in produced if r.value in POISON}
    assert len(bad) == len(poison)
    return Sales(produced, bad, topic)


def topology(name: str, data: Sales, cluster: Any, factory: StateFactory, errors: ErrorPolicy) -> Topology:
    t = Topology(name, errors=errors)
    spout = JsonCheckingSpout(config(cluster.bootstrap_servers(), topics=[data.topic]), name)
    (t.new_stream(spout)
     .each("get_json_object(CAST(value AS STRING), '$.user') AS user",
           "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount")
     .group_by("user").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    return t


def run(spark: Any, t: Topology, factory: StateFactory, metrics: Metrics,
        faults: Callable[[str, int], None] | None = None) -> Any:
    executor = SparkExecutor(spark, t, metrics=metrics)
    coord = coordinator(t, executor, factory.txstate_store(t.name), caps=CAPS, metrics=metrics)
    if faults is not None:
        coord._faults = faults
    try:
        coord.run_until_idle()
    finally:
        coord.close()
    return coord


def dead_letters(bootstrap: str, topic: str) -> list[Any]:
    """Every message of ``topic``, read_committed, from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        out, eof = [], set[int]()
        while len(eof) < len(parts):
            for m in c.consume(100, timeout=1.0):
                err = m.error()
                if err is None:
                    out.append(m)
                elif err.code() == KafkaError._PARTITION_EOF:
                    eof.add(cast(int, m.partition()))
        return out
    finally:
        c.close()


def test_skip_leaves_out_each_poison_record_and_counts_it(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Policy skip: a record that is not JSON (decode), whose amount does not CAST (transform) and with no
    user (aggregate, a null key) are left out; everything else commits; each is counted by stage and reason."""
    data = sales(spark_kafka)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    run(spark, topology("bad-skip", data, spark_kafka, factory, ErrorPolicy.skip()), factory, metrics)
    assert sqlite_table(tmp_path / "state.db", "sales", ["user"], ["total", "n"]) == data.truth()
    for stage, reason in POISON.values():
        assert metrics.value("trident_bad_records_total", pipeline="bad-skip", stage=stage.value, reason=reason,
                             action="skip") == 1, (stage, reason)


def test_dead_letter_writes_each_poison_record_once_across_a_replay(spark: Any, spark_kafka: Any,
                                                                    tmp_path: Path) -> None:
    """Policy dead_letter: each poison record lands in the dead-letter topic once, with its key, value and
    the source coordinates and error as headers, although every txid with a bad record fails once after its
    dead letters were committed (before its state write) and is replayed."""
    data = sales(spark_kafka)
    dlq = f"dead-{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(dlq, 2)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    failed: set[int] = set()

    def fail_once_after_dead_letters(point: str, txid: int) -> None:
        if point == "commit" and txid not in failed:
            failed.add(txid)
            raise ConnectionError("injected: the state is away")

    run(spark, topology("bad-dlq", data, spark_kafka, factory, ErrorPolicy.dead_letter(dlq)), factory, metrics,
        fail_once_after_dead_letters)
    assert sqlite_table(tmp_path / "state.db", "sales", ["user"], ["total", "n"]) == data.truth()
    letters = dead_letters(spark_kafka.bootstrap_servers(), dlq)
    seen = [coordinates_of(m.headers()) for m in letters]
    assert sorted(c for _, c in seen if c is not None) == sorted(data.poison)  # each exactly once
    assert {p for p, _ in seen} == {"bad-dlq"}
    by_coords = {(r.topic, r.partition, r.offset): r for r in data.produced}
    for m in letters:
        _, coords = coordinates_of(m.headers())
        assert coords is not None
        headers = dict(m.headers())
        assert m.value() == by_coords[coords].value
        stage, reason = data.poison[coords]
        assert headers["trident.stage"] == stage.value.encode()
        assert headers["trident.error.class"] == reason.encode()
        assert int(headers["trident.source.timestamp"]) > 0
        assert headers["trident.pipeline"] == b"bad-dlq"
    for stage, reason in POISON.values():
        assert metrics.value("trident_bad_records_total", pipeline="bad-dlq", stage=stage.value, reason=reason,
                             action="dead_letter") == 1


@pytest.mark.parametrize("poison", list(POISON))
def test_fail_stops_within_the_txid_naming_the_record(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                      poison: bytes) -> None:
    """Policy fail (the default): the first attempt of the txid holding the poison record stops the pipeline
    (permanent, exit code 1) with the record's topic, partition and offset and its error; earlier txids
    are committed, nothing of that txid is written."""
    data = sales(spark_kafka, poison=(poison,))
    (coords, (stage, reason)), = data.poison.items()
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    metrics = Metrics(CollectorRegistry())
    with pytest.raises(BadRecordError) as raised:
        run(spark, topology("bad-fail", data, spark_kafka, factory, ErrorPolicy()), factory, metrics)
    coord_text = f"{coords[0]}[{coords[1]}]@{coords[2]}"
    assert coord_text in str(raised.value)
    assert reason in str(raised.value)
    assert metrics.value("trident_batch_replays_total", pipeline="bad-fail") == 0  # within one txid
    assert metrics.value("trident_bad_records_total", pipeline="bad-fail", stage=stage.value, reason=reason,
                         action="fail") == 1


def test_the_json_sales_dead_letter_example(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """examples/json-sales-dead-letter as configured (JSON with declared types): a record that is not JSON,
    one with a mistyped amount, a negative amount (its CAST fails) and one without a store each land in
    the dead-letter topic once; the counts and totals per store equal the truth over the good records."""
    import yaml

    from app.config import compile_pipeline, parse

    root = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((root / "examples" / "json-sales-dead-letter" / "service.yaml").read_text())
    orders, dlq = f"orders-{uuid.uuid4().hex[:8]}", f"orders-dead-{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(orders, 2)
    spark_kafka.create_topic(dlq, 1)
    p = doc["pipelines"][0]
    p["spout"]["topics"] = [orders]
    p["state"]["sqlite_path"] = str(tmp_path / "sales.db")
    p["errors"]["dead_letter"]["topic"] = dlq
    config = parse(doc, {"KAFKA_BOOTSTRAP_SERVERS": spark_kafka.bootstrap_servers()})
    compiled = compile_pipeline(config, config.pipelines[0])
    rng = random.Random(5)
    good: list[dict[str, Any]] = [{"store": rng.choice(["berlin-1", "paris-2", "oslo-3"]), "amount": rng.randint(1, 400) / 4}
            for _ in range(90)]
    poison = [b"not json", b'{"store": "x", "amount": "lots"}', b'{"store": "x", "amount": -3}', b'{"amount": 5}']
    values = [(i % 2, json.dumps(g).encode()) for i, g in enumerate(good)]
    for j, v in enumerate(poison):
        values.insert(10 + 20 * j, (j % 2, v))
    produced = produce(spark_kafka.bootstrap_servers(), orders, values)
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, compiled.topology, metrics=metrics)
    coord = coordinator(compiled.topology, executor, compiled.store(), caps=CAPS, metrics=metrics)
    try:
        coord.run_until_idle()
    finally:
        coord.close()
    truth: dict[str, tuple[int, float]] = {}
    for g in good:
        n, total = truth.get(g["store"], (0, 0.0))
        truth[g["store"]] = (n + 1, total + g["amount"])
    assert sqlite_table(tmp_path / "sales.db", "sales_by_store", ["store"], ["orders", "total"]) == truth
    bad = {(r.topic, r.partition, r.offset): r.value for r in produced if r.value in poison}
    letters = dead_letters(spark_kafka.bootstrap_servers(), dlq)
    assert sorted(str(coordinates_of(m.headers())[1]) for m in letters) == sorted(str(c) for c in bad)
    stages = {dict(m.headers())["trident.stage"].decode() for m in letters}
    assert stages == {"decode", "transform", "aggregate"}


def test_quieting_probes_leaves_pyspark_s_own_loggers_alone(tmp_path: Any) -> None:
    """Quieting Spark while a probe fails must not create PySpark's "SQLQueryContextLogger" as a plain logger:
    in a process where a probe came first, every later analysis error became a TypeError from that logger."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "probe_first.py"
    script.write_text(
        "from pyspark.errors import AnalysisException\n"
        "from app.spark.bad_record_finding import quiet\n"
        "from app.spark.session import spark_session\n"
        "spark = spark_session(master='local[1]', app_name='probe-first')\n"
        "with quiet(spark):\n"
        "    pass\n"
        "try:\n"
        "    spark.range(1).filter('no_such_column > 1')\n"
        "except AnalysisException:\n"
        "    print('analysis error as such')\n")
    root = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "analysis error as such" in out.stdout, out.stderr[-3000:]
