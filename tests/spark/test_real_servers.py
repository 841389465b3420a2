"""Spark end to end against a real Kafka and a real Cassandra (KAFKA_BOOTSTRAP_SERVERS, CASSANDRA_CONTACT_POINTS).

The other Spark tests use librdkafka's mock cluster and the CQL test server, which answer the same
protocols but are not the servers users run: the mock serves records of aborted transactions to
``read_committed`` readers, and the CQL server's LWTs are not Paxos. Here the executors read a real
broker's log with aborted transactions in it and commit through real LWTs, with a commit job failing
after partial writes, and the stored rows are compared with a truth built from the producer's
committed transactions alone. Absent servers skip these tests with the reason (a failure under
REQUIRE_REAL_PEERS=1).
"""

from __future__ import annotations

import json
import random
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Topology
from spouts.planner import Caps
from states.factory import StateFactory
from tests.kafka.fixtures import RealKafkaPeer
from tests.kafka.helpers import config
from tests.spark.faults import FailTask, fired
from tests.spark.helpers import WORDS, coordinator, lines, word_counts
from tests.states.backends import cassandra_peer

pytestmark = [pytest.mark.real_kafka, pytest.mark.real_cassandra]
CAPS = Caps(per_partition=120, per_batch=300)


def produce_transactions(bootstrap: str, topic: str, partitions: int, transactions: int, *, seed: int,
                         abort_every: int = 3) -> tuple[Counter[str], int]:
    """Sentences in ``transactions`` transactions, every ``abort_every``-th aborted. The truth: the words
    of the committed ones, from their delivery reports; and how many records were aborted."""
    rng = random.Random(seed)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                  "linger.ms": 5})
    p.init_transactions(30)
    truth: Counter[str] = Counter()
    aborted = 0
    for t in range(transactions):
        acked: list[str] = []

        def on_delivery(text: str, acked: list[str] = acked) -> Callable[[Any, Any], None]:
            def delivered(err: Any, msg: Any) -> None:
                if err is None:
                    acked.append(text)
            return delivered

        p.begin_transaction()
        for _ in range(rng.randint(5, 40)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
            p.produce(topic, json.dumps({"text": text, "user": "u1", "amount": 1}).encode(),
                      partition=rng.randrange(partitions),
                      on_delivery=on_delivery(text))
        p.flush(30)
        if t % abort_every == abort_every - 1:
            p.abort_transaction(30)
            aborted += len(acked)
        else:
            p.commit_transaction(30)
            truth.update(w for text in acked for w in text.split(" "))
    return truth, aborted


def test_aborted_transactions_and_a_failed_commit_job_on_real_servers(
        spark: Any, real_kafka: RealKafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Word count from a real broker's log with aborted transactions into a real Cassandra, the commit job
    of txid 2 failing on every attempt after partial writes: the coordinator replays it from its frozen
    plan, and every stored count equals the committed transactions' words (aborted ones never count)."""
    from states.cassandra.session import shared_client

    topic = f"spark-real-{uuid.uuid4().hex[:8]}"
    real_kafka.create_topic(topic, 3)
    truth, aborted = produce_transactions(real_kafka.bootstrap_servers(), topic, 3, 24, seed=7)
    assert aborted > 0
    peer = cassandra_peer(request, "real")
    settings = peer.settings(f"spark_real_{uuid.uuid4().hex[:8]}")
    client = shared_client(settings)
    request.addfinalizer(lambda: client.session.execute(f"DROP KEYSPACE IF EXISTS {settings.keyspace}", timeout=60))
    factory = StateFactory(backend="cassandra", cassandra=settings)
    topology = Topology(f"real-{uuid.uuid4().hex[:6]}")
    spout_config = config(real_kafka.bootstrap_servers(), topics=[topic], request_timeout_s=10.0, read_timeout_s=20.0)
    from spouts.kafka import KafkaSpout

    word_counts(lines(topology, KafkaSpout(spout_config, topology.name)), factory)
    markers = tmp_path / "markers"
    markers.mkdir()
    metrics = Metrics(CollectorRegistry())
    executor = SparkExecutor(spark, topology, metrics=metrics, driver_keys=0,
                             faults=FailTask("commit", 2, str(markers), every_attempt=True))
    coord = coordinator(topology, executor, factory.txstate_store(topology.name), caps=CAPS, metrics=metrics)
    try:
        assert coord.run_until_idle() >= 2
    finally:
        coord.close()
        executor.close()
    assert fired(markers), "the commit fault never fired: the failure path was not exercised"
    assert metrics.value("trident_batch_replays_total", pipeline=topology.name) == 1
    rows = client.session.execute(f"SELECT word, count FROM {settings.keyspace}.word_counts")
    assert {r["word"]: r["count"] for r in rows} == dict(truth)
