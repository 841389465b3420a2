"""The Avro upsert example end to end: ``examples/avro-upsert/customers.yaml``, pointed at the mock Kafka
cluster, the Schema Registry test peer and the CQL test server, materialises Avro customers with
tombstones; the README's cqlsh queries read the ground truth computed from the delivery reports."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from app.config import compile_pipeline, parse
from app.spark import SparkExecutor
from spouts.planner import Caps
from tests.schemaregistry.server import SchemaRegistryServer
from tests.spark.helpers import coordinator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "avro-upsert"
CAPS = Caps(per_partition=60, per_batch=150)


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


def example_config(topic: str, bootstrap: str, registry_url: str, server: Any, keyspace: str) -> Any:
    """The example's document with its peers replaced by the test peers (no SASL, no passwords)."""
    doc = yaml.safe_load((EXAMPLE / "customers.yaml").read_text())
    doc["kafka"] = {"bootstrap_servers": bootstrap, "schema_registry": {"url": registry_url}}
    doc["cassandra"] = {"contact_points": [server.host], "port": server.port, "keyspace": keyspace,
                        "local_dc": server.data_center, "protocol_version": max(server.protocol_versions),
                        # the README's queries read one key without its shard, which takes Cassandra 5.0's
                        # storage-attached index; the CQL test server has none: a partition per key here
                        "shards": 0}
    doc["pipelines"][0]["spout"]["topics"] = [topic]
    return parse(doc, {})


def test_the_avro_upsert_example(spark: Any, spark_kafka: Any, cql_server_session: Any,
                                 registry: SchemaRegistryServer) -> None:
    """Every customer's row holds its newest record's values; tombstoned customers are deleted
    (row kept, deleted = true, with a txid); TTL(name) is the example's ttl_s."""
    from cassandra.cluster import Cluster

    server, topic, partitions = cql_server_session, f"customers-{uuid.uuid4().hex[:8]}", 3
    keyspace = f"avro_{uuid.uuid4().hex[:8]}"
    spark_kafka.create_topic(topic, partitions)
    serialize = AvroSerializer(registry_client(registry), (EXAMPLE / "customer.avsc").read_text())
    ctx = SerializationContext(topic, MessageField.VALUE)
    rng, last = random.Random(11), {}  # last: key -> its last document (None: a tombstone)
    acked: list[tuple[str, int, int, dict[str, Any] | None]] = []
    producer = Producer({"bootstrap.servers": spark_kafka.bootstrap_servers(), "enable.idempotence": True})
    for i in range(500):
        key = f"c-{rng.randrange(30)}"
        doc = None if rng.random() < 0.12 else {"name": f"name-{i}", "email": rng.choice([None, f"{i}@example.org"]),
                                                "balance": rng.randint(0, 10_000) / 4}
        producer.produce(topic, None if doc is None else serialize(doc, ctx), key=key.encode(),
                         partition=int(key[2:]) % partitions,  # a customer's records stay in order
                         on_delivery=lambda err, msg, k=key, d=doc: acked.append((k, msg.partition(), msg.offset(), d)))  # type: ignore[misc]  # defaults bind this call's values
    assert producer.flush(30) == 0
    assert len(acked) == 500
    for key, _, _offset, doc in sorted(acked, key=lambda a: (a[1], a[2])):
        last[key] = doc  # the last record of each key, in offset order  # noqa: PERF403  a loop reads clearer here
    config = example_config(topic, spark_kafka.bootstrap_servers(), registry.url, server, keyspace)
    compiled = compile_pipeline(config, "customers")
    executor = SparkExecutor(spark, compiled.topology)
    coord = coordinator(compiled.topology, executor, compiled.store(), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 3
    finally:
        coord.close()
        executor.close()
    cluster = Cluster([server.host], port=server.port, protocol_version=max(server.protocol_versions))
    try:
        session = cluster.connect()
        for key, doc in sorted(last.items()):  # the README's queries
            row = session.execute(f"SELECT customer_id, name, email, balance FROM {keyspace}.customers "
                                  "WHERE customer_id = %s", (key,)).one()
            state = session.execute(f"SELECT customer_id, deleted, txid FROM {keyspace}.customers "
                                    "WHERE customer_id = %s", (key,)).one()
            if doc is None:
                assert (state.deleted, row.name, state.txid is not None) == (True, None, True), key
            else:
                assert (row.name, row.email, row.balance, state.deleted) == (doc["name"], doc["email"],
                                                                            doc["balance"], False), key
                ttl = session.execute(f"SELECT customer_id, TTL(name) FROM {keyspace}.customers "
                                      "WHERE customer_id = %s", (key,)).one()[1]
                assert 31_536_000 - 600 < ttl <= 31_536_000
    finally:
        cluster.shutdown()
    assert any(d is None for d in last.values())
    assert any(d is not None for d in last.values())


def registry_client(server: SchemaRegistryServer) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": server.url})

