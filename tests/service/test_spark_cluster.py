"""Exactly once on a Spark standalone cluster: the service's executors are JVMs of their own on two
1-core workers (:mod:`tests.sparkcluster`), the state is in a real Cassandra and the records come
from a real Kafka (KAFKA_BOOTSTRAP_SERVERS, CASSANDRA_CONTACT_POINTS; absent: skipped with the reason,
a failure under REQUIRE_REAL_PEERS=1). An executor is SIGKILLed, a worker with its executors is
SIGKILLed and restarted, the whole service is SIGKILLed with a txid frozen but not committed, and
another executor is SIGKILLed after the restart; every stored count is then compared with the words
of the sentences the producer's delivery reports acknowledged.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chaos.cqlpeer import StoreDocuments
from tests.kafka.fixtures import RealKafkaPeer
from tests.peers import REAL_CASSANDRA, REAL_KAFKA, cassandra_from_env, missing_peer
from tests.service.helpers import ROOT, SentenceProducer, ServiceProcess, free_port, word_count_config
from tests.service.test_kill import drain_then_terminate, stop_in_freeze_window, wait_for_first_commit
from tests.sparkcluster import SparkCluster

pytestmark = [pytest.mark.slow, pytest.mark.real_kafka, pytest.mark.real_cassandra]
KEYSPACE = "trident"


class CassandraTables(StoreDocuments):
    """The test's reads of the real Cassandra: a table's rows and the coordinator's documents."""

    def __init__(self, hosts: tuple[str, ...], port: int) -> None:
        from cassandra.cluster import Cluster
        from cassandra.query import dict_factory

        self._cluster = Cluster(list(hosts), port=port, connect_timeout=10)
        self._session = self._cluster.connect()
        self._session.row_factory = dict_factory
        self._session.default_timeout = 30

    def rows(self, table: str, keyspace: str = KEYSPACE) -> list[dict[str, Any]]:
        from cassandra import InvalidRequest

        try:
            return list(self._session.execute(f"SELECT * FROM {keyspace}.{table}"))
        except InvalidRequest:  # no table yet
            return []

    def counts(self, table: str) -> dict[str, int]:
        return {r["word"]: int(r["count"]) for r in self.rows(table)}

    def close(self) -> None:
        self._cluster.shutdown()


def wait_for_more_commits(service: ServiceProcess, more: int, timeout: float = 180) -> None:
    """Wait until this run logged ``more`` commits beyond the present count (the service alive throughout)."""
    target = service.commits_this_run() + more
    deadline = time.monotonic() + timeout
    while service.commits_this_run() < target:
        service.check_alive()
        assert time.monotonic() < deadline, f"fewer than {more} more commits in {timeout} s:\n{service.tail()}"
        time.sleep(0.2)


def write_record(path: Path, kills: list[str], sentences: int, truth: Mapping[str, int], stored: dict[str, int],
                 commits: int, seconds: float, load_before: float) -> None:
    """This run's figures for docs/reliability.md (``python -m tests.chaos --report ...`` renders them), written
    before the comparison is asserted so that a failing run is recorded too."""
    words = set(truth) | set(stored)
    path.write_text(json.dumps({
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() - seconds)), "seconds": seconds,
        "kills": kills, "sentences": sentences, "words": sum(truth.values()), "keys": len(truth),
        "lost": sum(max(0, truth.get(w, 0) - stored.get(w, 0)) for w in words),
        "twice": sum(max(0, stored.get(w, 0) - truth.get(w, 0)) for w in words),
        "differing": sum(truth.get(w, 0) != stored.get(w, 0) for w in words), "commits": commits,
        "cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()[0],
        "command": f"SPARK_CLUSTER_RECORD={path} REQUIRE_REAL_PEERS=1 python -m pytest "
                   "tests/service/test_spark_cluster.py"}, indent=1))


@pytest.mark.timeout(900)
def test_exactly_once_on_a_standalone_cluster_through_executor_worker_and_service_kills(tmp_path: Path) -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        missing_peer(REAL_KAFKA, "real Kafka: KAFKA_BOOTSTRAP_SERVERS is not set")
    named = cassandra_from_env()
    if named is None:
        missing_peer(REAL_CASSANDRA, "real Cassandra: CASSANDRA_CONTACT_POINTS is not set")
    hosts, cassandra_port = named
    started, load_before = time.monotonic(), os.getloadavg()[0]
    run = uuid.uuid4().hex[:10]
    topic, pipeline, table = f"cluster-{run}", f"cluster-{run}", f"cluster_words_{run}"
    kafka = RealKafkaPeer(bootstrap, int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1")))
    kafka.create_topic(topic, 4)
    tables = CassandraTables(hosts, cassandra_port)
    port = free_port()
    with SparkCluster(tmp_path / "spark", workers=2, cores=1) as cluster:
        config = word_count_config(
            tmp_path / "service.yaml", bootstrap=bootstrap, topic=topic, port=port, pipeline_id=pipeline,
            state={"backend": "cassandra", "table": table, "cache_size": 100}, caps=(1500, 5000),
            cassandra={"contact_points": list(hosts), "port": cassandra_port, "keyspace": KEYSPACE,
                       "request_timeout_s": 10})
        doc = yaml.safe_load(config.read_text())
        # a cluster master: no shuffle partitions or parallelism given (the service sizes them from the
        # executors); the executors import this checkout and stay small enough for 1 GB workers
        doc["spark"] = {"master": cluster.master_url,
                        "conf": {"spark.executorEnv.PYTHONPATH": str(ROOT), "spark.executor.memory": "512m"}}
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        service = ServiceProcess(config, tmp_path / "service.log", port, env={"SPARK_LOCAL_IP": "127.0.0.1"})
        producer = SentenceProducer(bootstrap, topic, 4, rate=300, seed=int(run[:6], 16))
        producer.start()
        kills: list[str] = []
        try:
            service.start()
            wait_for_first_commit(service, timeout=240)
            kills.append(f"executor {cluster.kill_executor()}")
            wait_for_more_commits(service, 2)
            cluster.kill_worker(0)
            kills.append("worker 0")
            wait_for_more_commits(service, 2)
            cluster.start_worker(0)
            wait_for_more_commits(service, 2)
            stop_in_freeze_window(service, lambda: tables.documents(pipeline))
            service.kill()
            kills.append("service (a txid frozen, not committed)")
            service.start()
            wait_for_first_commit(service, timeout=240)
            cluster.wait_for_executors(2)
            kills.append(f"executor {cluster.kill_executor()}")
            wait_for_more_commits(service, 2)
            truth = producer.stop()
            drain_then_terminate(service, lambda: tables.counts(table), truth, poll_s=1.0)
        finally:
            service.cleanup()
            producer.stop() if producer.is_alive() else None
        stored = tables.counts(table)
        tables.close()
    log = service.log.read_text(errors="replace")
    summary = (f"kills: {', '.join(kills)}; {producer.acked} sentences, {sum(truth.values())} words, "
               f"{log.count('committed txid')} txid commits logged, {time.monotonic() - started:.0f} s")
    print(summary)
    if record := os.environ.get("SPARK_CLUSTER_RECORD"):
        write_record(Path(record), kills, producer.acked, truth, stored, log.count("committed txid"),
                     time.monotonic() - started, load_before)
    # sized from the executors (2 workers of 1 core), not Spark's 200 shuffle partitions
    assert re.search(r"parallelism 2 read tasks, 2 commit tasks per keyed sink, 2 shuffle partitions \(set from "
                     r"the executors' cores\)", log), summary
    assert stored == dict(truth), summary
