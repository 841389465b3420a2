"""Latest-value upserts through Spark: Kafka (mock cluster) -> SparkExecutor -> SQLite / Cassandra (CQL test server).

Records are keyed JSON documents or tombstones (null values), spread over partitions with
explicit timestamps that disagree with offset order across partitions. The ground truth is
computed in plain Python from the producer's delivery reports: per key, the record with the
highest (lowest, for ``first``) ``(timestamp, partition, offset)``; with tombstones deleting, a
key whose latest record is a tombstone is absent.
"""

from __future__ import annotations

import json
import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from app.query import query, stored_spec
from app.spark import SparkExecutor
from app.spark.plan import TopologyCompileError
from app.topology.topology import Agg, Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count
from states.aggregators import First, Latest
from states.factory import StateFactory
from tests.kafka.helpers import config
from tests.spark.helpers import coordinator

CAPS = Caps(per_partition=70, per_batch=150)
KEYS = 25
Acked = tuple[str, int, int, int, dict[str, Any] | None]  # key, timestamp, partition, offset, document or None


def produce_upserts(bootstrap: str, topic: str, n: int, partitions: int, seed: int) -> list[Acked]:
    """``n`` keyed records (a tenth tombstones) with shuffled timestamps; what the broker acknowledged."""
    rng = random.Random(seed)
    acked: list[Acked] = []

    def report(key: str, ts: int, doc: dict[str, Any] | None, err: Any, msg: Any) -> None:
        assert err is None, err
        acked.append((key, ts, msg.partition(), msg.offset(), doc))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(n):
        key, ts = f"k{rng.randrange(KEYS)}", 1_700_000_000_000 + rng.randrange(n // 2)  # ties too
        doc = None if rng.random() < 0.1 else {"amount": rng.randint(-50, 1000), "name": f"n{i}"}
        p.produce(topic, None if doc is None else json.dumps(doc).encode(), key=key.encode(),
                  partition=rng.randrange(partitions), timestamp=ts,
                  on_delivery=lambda err, msg, k=key, t=ts, d=doc: report(k, t, d, err, msg))  # type: ignore[misc]  # defaults bind this call's values
    assert p.flush(30) == 0
    return acked


def truth(acked: list[Acked], pick: Any, *, tombstones: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in {a[0] for a in acked}:
        mine = [a for a in acked if a[0] == key and (tombstones or a[4] is not None)]
        if mine:
            chosen = pick(mine, key=lambda a: (a[1], a[2], a[3]))
            if chosen[4] is not None:
                out[key] = (chosen[4]["amount"], chosen[4]["name"])
    return out


def upserts(stream: Any, factory: StateFactory, name: str, aggregator: Any, tombstones: str, **kw: Any) -> Any:
    """``id``, ``amount``, ``name`` from a keyed JSON record (the key survives a tombstone's null value)."""
    typed = stream.map("CAST(key AS STRING) AS id",
                       "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount",
                       "get_json_object(CAST(value AS STRING), '$.name') AS name")
    return typed.group_by("id").persistent_aggregate(
        factory, [Agg(aggregator, "amount", "amount"), Agg(aggregator, "name", "name")], name=name,
        tombstones=tombstones, **kw)


def _run(spark: Any, kafka: Any, factory: StateFactory, seed: int, **latest_kw: Any) -> tuple[list[Acked], Any, Any]:
    topic = f"upsert-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 3)
    acked = produce_upserts(kafka.bootstrap_servers(), topic, 600, 3, seed)
    topology = Topology(f"upsert-{uuid.uuid4().hex[:6]}")
    stream = topology.new_stream(KafkaSpout(config(kafka.bootstrap_servers(), topics=[topic]), topology.name))
    latest = upserts(stream, factory, "accounts", Latest(), "delete", **latest_kw)
    first = upserts(stream, factory, "first_seen", First(), "ignore")
    executor = SparkExecutor(spark, topology)
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS)
    try:
        assert coord.run_until_idle() >= 4
    finally:
        coord.close()
        executor.close()
    return acked, latest, first


def test_latest_and_first_into_sqlite(spark: Any, spark_kafka: Any, tmp_path: Path) -> None:
    """Over several batches: the latest table equals the newest record per key (deleted keys absent,
    their rows kept with a txid and deleted = 1), the first table the oldest non-tombstone record."""
    db = tmp_path / "state.db"
    acked, latest, first = _run(spark, spark_kafka, StateFactory(backend="sqlite", sqlite_path=str(db)), seed=5)
    want_latest = truth(acked, max, tombstones=True)
    want_first = truth(acked, min, tombstones=False)
    keys = sorted({a[0] for a in acked})
    assert 0 < len(want_latest) < len(keys), "some keys end deleted, some not"
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute("SELECT id, amount, name, deleted, txid FROM accounts").fetchall()
        firsts = conn.execute("SELECT id, amount, name FROM first_seen").fetchall()
    finally:
        conn.close()
    assert {r[0]: (r[1], r[2]) for r in rows if not r[3]} == want_latest
    assert {r[0] for r in rows if r[3]} == set(keys) - set(want_latest)  # tombstone rows stay
    assert all(r[4] is not None for r in rows)
    assert {r[0]: (r[1], r[2]) for r in firsts} == want_first
    assert query(latest, keys) == [want_latest.get(k) for k in keys]
    assert query(first, keys[:3]) == [want_first.get(k) for k in keys[:3]]
    assert stored_spec(latest).tombstones
    assert stored_spec(latest).value[0].stamped


def test_latest_into_cassandra_with_a_ttl(spark: Any, spark_kafka: Any, cql_server_session: Any) -> None:
    """The same into the CQL test server with ttl_s: rows match the truth and TTL(amount) is set."""
    from cassandra.cluster import Cluster

    from states.cassandra import CassandraSettings

    server = cql_server_session
    keyspace = f"upsert_{uuid.uuid4().hex[:8]}"
    settings = CassandraSettings(contact_points=(server.host,), port=server.port, keyspace=keyspace,
                                 local_dc=server.data_center, protocol_version=max(server.protocol_versions),
                                 backoff_initial_s=0.02, backoff_max_s=0.5, reconnect_base_s=0.05,
                                 reconnect_max_s=0.5)
    acked, latest, _ = _run(spark, spark_kafka, StateFactory(backend="cassandra", cassandra=settings), seed=6,
                            ttl_s=86_400)
    want = truth(acked, max, tombstones=True)
    rows = server.rows(keyspace, "accounts")
    assert {r["id"]: (r["amount"], r["name"]) for r in rows if not r["deleted"]} == want
    cluster = Cluster([server.host], port=server.port, protocol_version=max(server.protocol_versions))
    try:
        session = cluster.connect(keyspace)
        ttls = [r[0] for r in session.execute("SELECT TTL(amount) FROM accounts")]
    finally:
        cluster.shutdown()
    assert ttls
    assert all(t is None or 86_000 < t <= 86_400 for t in ttls)  # None: a null amount has no cell
    assert any(t is not None for t in ttls)
    keys = sorted({a[0] for a in acked})
    assert query(latest, keys) == [want.get(k) for k in keys]


def test_refused_at_compile_time(spark: Any, tmp_path: Path) -> None:
    """A function transform that drops the carried record place, or tombstones: delete with a
    non-latest aggregate, are refused before any batch runs, saying why."""
    factory = StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "s.db"))
    topology = Topology("upsert-refused")
    stream = topology.new_stream(KafkaSpout(config("127.0.0.1:1", topics=["t"]), topology.name))
    typed = stream.map("CAST(key AS STRING) AS id", "value AS v")
    dropped = typed.apply(lambda df: df.select("id", "v"))
    dropped.group_by("id").persistent_aggregate(factory, [Agg(Latest(), "v", "v")], name="dropped")
    with pytest.raises(TopologyCompileError, match="_place"):
        SparkExecutor(spark, topology)
    with pytest.raises(ValueError, match="every aggregate to be latest"):
        typed.group_by("id").persistent_aggregate(factory, [Agg(Latest(), "v", "v"), Agg(Count(), "n")],
                                                  name="mixed", tombstones="delete")
