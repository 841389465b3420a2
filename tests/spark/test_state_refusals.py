"""What the state cannot hold, on Spark against a real Kafka and a real Cassandra.

* A table dropped after txids were committed into it, while the pipeline runs or while it is stopped,
  stops the pipeline for good (exit 2) naming the table and the last committed txid; it is never
  created again empty. A ``rewind --reset-state`` is the way to a recount into a new empty table.
* A group-by key Cassandra refuses for the row (an empty partition key, one over 65535 bytes) is a bad
  record of its source record: skipped and counted, dead-lettered once, or a stop naming it; the rest of
  its txid commits, and the stored state equals the truth computed from the input.

The CQL test server is not used: what is tested is what a real Cassandra refuses. Absent servers skip
these tests with the reason (a failure under REQUIRE_REAL_PEERS=1).
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from app.bad_records.dead_letters import coordinates_of
from app.bad_records.error_policy import ErrorPolicy
from app.coordinator.progress import record_rewind
from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Agg, Topology
from spouts.bad_records import BadRecordError
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count, Sum
from states.errors import StateTableMissingError
from states.factory import StateFactory
from tests.kafka.fixtures import RealKafkaPeer
from tests.kafka.helpers import config, produce
from tests.spark.helpers import coordinator, lines, sentences, word_counts
from tests.spark.test_bad_records import dead_letters
from tests.states.backends import cassandra_settings

pytestmark = [pytest.mark.real_kafka, pytest.mark.real_cassandra]
CAPS = Caps(per_partition=20, per_batch=40)


def _table_exists(client: Any, keyspace: str, table: str) -> bool:
    return bool(list(client.session.execute("SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s "
                                            "AND table_name = %s", (keyspace, table))))


def _words(client: Any, keyspace: str) -> dict[str, int]:
    return {r["word"]: r["count"] for r in client.session.execute(f"SELECT word, count FROM {keyspace}.word_counts")}


def test_a_dropped_table_stops_the_pipeline_and_is_never_created_again(
        spark: Any, real_kafka: RealKafkaPeer, request: pytest.FixtureRequest) -> None:
    """Txids committed, then DROP TABLE while the pipeline runs: the next commit stops it for good (exit 2)
    naming the table and the last committed txid. A restart stops before its first txid, though nothing
    new is there to read. The table is never created again; after a rewind with --reset-state (its audit
    line), the next txid creates it empty and counts from the rewind's target on."""
    from states.cassandra.session import shared_client

    topic = f"lost-{uuid.uuid4().hex[:8]}"
    real_kafka.create_topic(topic, 2)
    bootstrap = real_kafka.bootstrap_servers()
    first = produce(bootstrap, topic, sentences(60, 2, seed=5))
    settings = cassandra_settings(request, "real")
    client = shared_client(settings)
    factory = StateFactory(backend="cassandra", cassandra=settings)
    t = Topology(f"lost-{uuid.uuid4().hex[:6]}")
    word_counts(lines(t, KafkaSpout(config(bootstrap, topics=[topic]), t.name)), factory)
    store = factory.txstate_store(t.name)
    coord = coordinator(t, SparkExecutor(spark, t), store, caps=CAPS)
    try:
        assert coord.run_until_idle() >= 2
        last = coord.committed_txid
        truth = Counter(w for r in first for w in json.loads(r.value)["text"].split(" "))
        assert _words(client, settings.keyspace) == dict(truth)
        client.session.execute(f"DROP TABLE {settings.keyspace}.word_counts", timeout=60)
        produce(bootstrap, topic, sentences(10, 2, seed=6))
        with pytest.raises(StateTableMissingError) as running:
            coord.run_until_idle()
    finally:
        coord.close()
    assert running.value.committed_txid == last
    assert f"{settings.keyspace}.word_counts" in str(running.value)
    assert coord.stopped_by is not None
    assert coord.stopped_by.exit_code == 2
    assert coord.committed_txid == last
    assert not _table_exists(client, settings.keyspace, "word_counts")

    restarted = coordinator(t, SparkExecutor(spark, t), store, caps=CAPS)
    try:
        with pytest.raises(StateTableMissingError) as at_start:
            restarted.run_until_idle()
    finally:
        restarted.close()
    assert at_start.value.committed_txid == last
    assert restarted.stopped_by is not None
    assert restarted.stopped_by.exit_code == 2
    assert f"txid {last}" in restarted.stopped_by.reason
    assert not _table_exists(client, settings.keyspace, "word_counts")

    # the way out: a rewind that empties the state (here its record: the txid it committed, reset_state)
    epoch = store.acquire_lease("rewind", 30.0)
    record_rewind(store, epoch=epoch, txid=last, audit={"txid": last, "reset_state": True, "done": True})
    store.release_lease("rewind", epoch)
    recount = coordinator(t, SparkExecutor(spark, t), store, caps=CAPS)
    try:
        assert recount.run_until_idle() >= 1
    finally:
        recount.close()
    assert _table_exists(client, settings.keyspace, "word_counts")
    assert sum(_words(client, settings.keyspace).values()) > 0


def _orders(real_kafka: RealKafkaPeer, bad_users: list[str]) -> tuple[str, list[Any], set[tuple[str, int, int]]]:
    """A topic of orders by user, with ``bad_users`` (keys Cassandra refuses) spread among them."""
    topic = f"keys-{uuid.uuid4().hex[:8]}"
    real_kafka.create_topic(topic, 2)
    rng = random.Random(4)
    values = [(i % 2, json.dumps({"user": rng.choice(["ann", "bob", "cy"]), "amount": rng.randint(1, 9)}).encode())
              for i in range(50)]
    for j, user in enumerate(bad_users):
        values.insert(7 + 23 * j, (j % 2, json.dumps({"user": user, "amount": 1000}).encode()))
    produced = produce(real_kafka.bootstrap_servers(), topic, values)
    bad = {(r.topic, r.partition, r.offset) for r in produced if json.loads(r.value)["user"] in bad_users}
    assert len(bad) == len(bad_users)
    return topic, produced, bad


def _truth(produced: list[Any], bad: set[tuple[str, int, int]]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for r in produced:
        if (r.topic, r.partition, r.offset) not in bad:
            doc = json.loads(r.value)
            total, n = out.get(doc["user"], (0, 0))
            out[doc["user"]] = (total + doc["amount"], n + 1)
    return out


def _sales(name: str, topic: str, bootstrap: str, factory: StateFactory, errors: ErrorPolicy) -> Topology:
    t = Topology(name, errors=errors)
    (lines(t, KafkaSpout(config(bootstrap, topics=[topic]), name))
     .each("get_json_object(json, '$.user') AS user", "CAST(get_json_object(json, '$.amount') AS BIGINT) AS amount")
     .group_by("user").persistent_aggregate(factory, [Agg(Sum(), "total", "amount"), Agg(Count(), "n")],
                                            name="sales"))
    return t


BAD_USERS = ["", "x" * 70_000]


@pytest.mark.parametrize("policy", ["skip", "dead_letter"])
def test_keys_cassandra_refuses_are_bad_records(spark: Any, real_kafka: RealKafkaPeer,
                                                request: pytest.FixtureRequest, policy: str) -> None:
    """An empty user and a 70000-byte one (Cassandra: "Key may not be empty", "Key length ... longer than
    65535") under skip or dead_letter: every txid commits at its first attempt, the stored sums equal the
    truth over the other orders, and each bad one is counted once (EMPTY_KEY, KEY_TOO_LONG), dead-lettered
    once, never retried as an outage."""
    from states.cassandra.session import shared_client

    topic, produced, bad = _orders(real_kafka, BAD_USERS)
    bootstrap = real_kafka.bootstrap_servers()
    settings = cassandra_settings(request, "real")
    factory = StateFactory(backend="cassandra", cassandra=settings)
    name = f"keys-{policy.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    dlq = f"dead-{uuid.uuid4().hex[:8]}"
    if policy == "dead_letter":
        real_kafka.create_topic(dlq, 1)
    errors = ErrorPolicy.skip() if policy == "skip" else ErrorPolicy.dead_letter(dlq)
    t = _sales(name, topic, bootstrap, factory, errors)
    metrics = Metrics(CollectorRegistry())
    coord = coordinator(t, SparkExecutor(spark, t, metrics=metrics), factory.txstate_store(name), caps=CAPS,
                        metrics=metrics)
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
    assert metrics.value("trident_batch_replays_total", pipeline=name) == 0
    rows = shared_client(settings).session.execute(f"SELECT user, total, n FROM {settings.keyspace}.sales")
    assert {r["user"]: (r["total"], r["n"]) for r in rows} == _truth(produced, bad)
    for reason in ("EMPTY_KEY", "KEY_TOO_LONG"):
        assert metrics.value("trident_bad_records_total", pipeline=name, stage="aggregate", reason=reason,
                             action=policy) == 1, reason
    if policy == "dead_letter":
        letters = dead_letters(bootstrap, dlq)
        assert sorted(c for _, c in (coordinates_of(m.headers()) for m in letters) if c is not None) == sorted(bad)
        assert {dict(m.headers())["trident.error.class"] for m in letters} == {b"EMPTY_KEY", b"KEY_TOO_LONG"}


@pytest.mark.parametrize("user", BAD_USERS, ids=["empty", "too-long"])
def test_a_key_cassandra_refuses_under_fail_names_the_record(spark: Any, real_kafka: RealKafkaPeer,
                                                             request: pytest.FixtureRequest, user: str) -> None:
    """Policy fail: the txid holding the refused key stops the pipeline at its first attempt (exit 1) naming
    the record's topic, partition and offset; the earlier txids stay committed."""
    topic, _, bad = _orders(real_kafka, [user])
    settings = cassandra_settings(request, "real")
    factory = StateFactory(backend="cassandra", cassandra=settings)
    name = f"keys-fail-{uuid.uuid4().hex[:6]}"
    t = _sales(name, topic, real_kafka.bootstrap_servers(), factory, ErrorPolicy.fail())
    metrics = Metrics(CollectorRegistry())
    coord = coordinator(t, SparkExecutor(spark, t, metrics=metrics), factory.txstate_store(name), caps=CAPS,
                        metrics=metrics)
    try:
        with pytest.raises(BadRecordError) as e:
            coord.run_until_idle()
    finally:
        coord.close()
    (t_, p, o), = bad
    assert f"{t_}[{p}]@{o}" in str(e.value)
    assert coord.stopped_by is not None
    assert coord.stopped_by.exit_code == 1
    assert metrics.value("trident_batch_replays_total", pipeline=name) == 0
