"""Typed record formats end to end: Kafka (mock cluster) -> decode on executors -> Spark -> SQLite.

Avro through the Schema Registry test peer, with a compatible schema change (a new optional
field) in the middle of the stream, and JSON with declared types; each stored table equals a
ground truth computed in plain Python from the documents the test produced.
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from prometheus_client import CollectorRegistry

from app.spark import SparkExecutor
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.kafka.formats import RecordFormat, RegistrySettings
from spouts.planner import Caps
from states import Count, Max, Sum
from states.factory import StateFactory
from tests.kafka.fixtures import RealKafkaPeer
from tests.kafka.helpers import config, produce
from tests.schemaregistry.fixtures import registry_settings
from tests.schemaregistry.server import SchemaRegistryServer
from tests.spark.helpers import WORDS, coordinator, sqlite_table

CAPS = Caps(per_partition=100, per_batch=250)  # several txids per run
SALE_V1 = {"type": "record", "name": "Sale", "namespace": "shop", "fields": [
    {"name": "store", "type": "string"}, {"name": "amount", "type": "long"}]}
SALE_V2 = {**SALE_V1, "fields": [*SALE_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.fixture(scope="module")
def peer() -> Iterator[SchemaRegistryServer]:
    """The registry test peer on loopback: Spark's Python workers fetch writer schemas from it."""
    with SchemaRegistryServer() as server:
        yield server


@pytest.fixture(params=["peer", "env"])
def registry(request: pytest.FixtureRequest, peer: SchemaRegistryServer) -> RegistrySettings:
    """The test peer, then a real registry when SCHEMA_REGISTRY_URL names one (skipped otherwise)."""
    return registry_settings(request.param, peer)


def sales(n: int, seed: int, *, note: bool = False) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for i in range(n):
        doc: dict[str, Any] = {"store": f"s{rng.randrange(5)}", "amount": rng.randint(-20, 500)}
        if note:
            doc["note"] = None if i % 3 == 0 else rng.choice(WORDS)
        docs.append(doc)
    return docs


def truth(docs: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for d in docs:
        total, n = out.get(d["store"], (0, 0))
        out[d["store"]] = (total + d["amount"], n + 1)
    return out


def test_avro_through_the_registry_with_a_schema_change_mid_stream(spark: Any, spark_kafka: Any, tmp_path: Path,
                                                                   registry: RegistrySettings,
                                                                   peer: SchemaRegistryServer) -> None:
    served = len(peer.registry.requests)
    topic, partitions = f"avro-{uuid.uuid4().hex[:10]}", 3
    spark_kafka.create_topic(topic, partitions)

    def send(schema: dict[str, Any], docs: list[dict[str, Any]]) -> None:
        ser = AvroSerializer(registry.client(), json.dumps(schema))
        ctx = SerializationContext(topic, MessageField.VALUE)
        produce(spark_kafka.bootstrap_servers(), topic, [(i % partitions, ser(d, ctx)) for i, d in enumerate(docs)])

    first = sales(400, seed=1)
    send(SALE_V1, first)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("avro-e2e")
    spout = KafkaSpout(replace(config(spark_kafka.bootstrap_servers(), topics=[topic]),
                               value_format=RecordFormat.of("avro"), schema_registry=registry), topology.name)
    stream = topology.new_stream(spout).each("value.store AS store", "value.amount AS amount")
    stream.group_by("store").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                                  name="avro_sales")
    executor = SparkExecutor(spark, topology)  # compiles on the spout's schema: v1, the latest now
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 2
        second = sales(400, seed=2, note=True)
        send(SALE_V2, second)  # registered now: a compatible change (a new optional field)
        assert list(registry.client().get_versions(f"{topic}-value")) == [1, 2]
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    assert sqlite_table(tmp_path / "state.db", "avro_sales", ["store"], ["total", "n"]) == truth(first + second)
    if registry.url == peer.url:  # the v2 records were resolved by id, on the executors
        v2 = registry.client().get_latest_version(f"{topic}-value").schema_id
        assert ("GET", f"/schemas/ids/{v2}") in peer.registry.requests[served:]


def test_json_with_declared_types(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    topic, partitions = f"json-{uuid.uuid4().hex[:10]}", 3
    spark_kafka.create_topic(topic, partitions)
    rng = random.Random(7)
    docs: list[dict[str, Any]] = [{"user": f"u{rng.randrange(6)}", "amount": rng.randint(-50, 1000), "price": f"{rng.randint(0, 9999) / 100:.2f}",
             "at": f"2024-03-{rng.randint(1, 28):02d}T10:00:00Z", "text": " ".join(rng.choice(WORDS) for _ in range(3)),
             "ignored": [1, 2]} for _ in range(700)]
    produce(spark_kafka.bootstrap_servers(), topic, [(i % partitions, json.dumps(d).encode()) for i, d in enumerate(docs)])
    fields = {"user": "string", "amount": "bigint", "price": "decimal(10,2)", "at": "timestamp", "text": "string"}
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    topology = Topology("json-e2e")
    spout = KafkaSpout(replace(config(spark_kafka.bootstrap_servers(), topics=[topic]),
                               value_format=RecordFormat.of({"type": "json", "fields": fields})), topology.name)
    stream = topology.new_stream(spout)
    typed = stream.each("value.user AS user", "value.amount AS amount", "CAST(value.price * 100 AS BIGINT) AS cents",
                        "day(value.at) AS day")
    typed.group_by("user").persistent_aggregate(
        factory, [Agg(Sum(), "total", "amount"), Agg(Sum(), "cents", "cents"), Agg(Max(), "last_day", "day")],
        name="json_users")
    words = stream.map("explode(split(value.text, ' ')) AS word")
    words.group_by("word").persistent_aggregate(factory, Count(), output="count", name="json_words")
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    expected: dict[str, tuple[int, int, int]] = {}
    for d in docs:
        total, cents, day = expected.get(d["user"], (0, 0, 0))
        expected[d["user"]] = (total + d["amount"], cents + round(float(d["price"]) * 100),
                               max(day, int(d["at"][8:10])))
    db = tmp_path / "state.db"
    assert sqlite_table(db, "json_users", ["user"], ["total", "cents", "last_day"]) == expected
    assert sqlite_table(db, "json_words", ["word"], ["count"]) == dict(Counter(w for d in docs for w in d["text"].split()))


@pytest.mark.real_kafka
@pytest.mark.parametrize("policy", ["skip", "dead_letter"])
def test_json_null_and_byte_order_marks_on_a_real_kafka(spark: Any, real_kafka: RealKafkaPeer, tmp_path: Path,
                                                        policy: str) -> None:
    """JSON values ``null``, other non-objects, blank ones and objects behind a UTF-8 byte-order mark (first in
    a partition and not) through the pipeline on a real Kafka: the store holds the good records (a marked object
    is good, as for Python's parser), each bad one is skipped or dead-lettered exactly once, although each txid
    holding one fails once after its dead letters and is replayed; nothing crashes, no txid stalls."""
    from app.bad_records.dead_letters import coordinates_of
    from app.bad_records.error_policy import ErrorPolicy
    from app.metrics import Metrics
    from tests.spark.test_bad_records import dead_letters

    topic, partitions, bom = f"json-odd-{uuid.uuid4().hex[:8]}", 3, "\ufeff".encode()
    real_kafka.create_topic(topic, partitions)
    rng = random.Random(23)
    values = [(i % partitions, json.dumps({"user": f"u{rng.randrange(4)}", "amount": rng.randint(-9, 99)}).encode())
              for i in range(300)]
    odd = [b"null", bom + b'{"user": "u9", "amount": 5}', b" null ", b"[1]", b"", b"42", bom + b"null",
           bom + b' {"user": "u8", "amount": 7}', b'{"user": "u1", "amount": 1}{"user": "u2", "amount": 2}']
    values.insert(0, (0, bom + b'{"user": "u7", "amount": 3}'))  # the first record of partition 0
    for j, v in enumerate(odd):
        values.insert(40 + j * 29, (j % partitions, v))
    produced = produce(real_kafka.bootstrap_servers(), topic, values)
    truth: dict[str, tuple[int, int]] = {}
    bad: set[tuple[str, int, int]] = set()
    for r in produced:  # Python's parser, which drops a leading byte-order mark from bytes
        try:
            doc = json.loads(r.value)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            bad.add((r.topic, r.partition, r.offset))
            continue
        total, n = truth.get(doc["user"], (0, 0))
        truth[doc["user"]] = (total + doc["amount"], n + 1)
    assert len(bad) == 7
    assert {"u7", "u8", "u9"} <= set(truth)
    dlq = f"dead-{uuid.uuid4().hex[:8]}"
    if policy == "dead_letter":
        real_kafka.create_topic(dlq, 1)
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    name = f"json-odd-{policy.replace('_', '-')}"
    topology = Topology(name, errors=ErrorPolicy.skip() if policy == "skip" else ErrorPolicy.dead_letter(dlq))
    spout = KafkaSpout(replace(config(real_kafka.bootstrap_servers(), topics=[topic]), value_format=RecordFormat.of(
        {"type": "json", "fields": {"user": "string", "amount": "bigint"}})), topology.name)
    (topology.new_stream(spout).each("value.user AS user", "value.amount AS amount").group_by("user")
     .persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")], name="odd_json"))
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, topology, metrics=metrics)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS, metrics=metrics)
    failed: set[int] = set()

    def fail_once_after_dead_letters(point: str, txid: int) -> None:
        if policy == "dead_letter" and point == "commit" and txid not in failed:
            failed.add(txid)
            raise ConnectionError("injected: the state is away")

    coord._faults = fail_once_after_dead_letters
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    assert sqlite_table(tmp_path / "state.db", "odd_json", ["user"], ["total", "n"]) == truth
    counted = sum(metrics.value("trident_bad_records_total", pipeline=name, stage="decode", reason=reason,
                                action=policy) for reason in ("json_invalid", "json_not_object", "json_type"))
    assert counted == len(bad)
    if policy == "dead_letter":
        assert failed, "no txid was replayed"
        letters = [coordinates_of(m.headers())[1] for m in dead_letters(real_kafka.bootstrap_servers(), dlq)]
        assert sorted(c for c in letters if c is not None) == sorted(bad)  # each exactly once
