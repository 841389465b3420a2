"""The commit phase of ``python -m app run``: a stable key set, every key updated once per txid, into Cassandra.

Records ``k0 .. k<keys-1>`` are produced round after round over the topic's partitions, and the
pipeline's caps make each txid exactly one round, so every txid commits every key once. The
service runs as its own process (``python -m app run --config``, Spark ``local[2]``); its
``/metrics`` give, per phase of the run, the keys committed, the commit phase's seconds and the
Cassandra requests its executors sent (which include the coordinator's own few per txid):

1. **new keys**: round 1 into an empty table;
2. **steady**: the next rounds, each key in the same commit partition, hence the same cache file;
3. **cold**: after a restart (a new Spark application: no cache files) over the existing rows.

:class:`StableKeys` runs the same pipeline in this process (Coordinator and SparkExecutor), for
tests that count requests per txid.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count
from states.cassandra import CassandraSettings
from states.factory import StateFactory
from tests.kafka.helpers import config, produce
from tests.service.helpers import ServiceProcess, free_port
from tests.spark.helpers import coordinator

KINDS = ("read", "cas", "serial_read")


@dataclass(frozen=True)
class Phase:
    """Keys committed by some txids of the service, their commit-phase seconds and requests by kind."""

    name: str
    keys: int
    commit_s: float
    requests: dict[str, int]

    @classmethod
    def between(cls, name: str, before: dict[str, float], after: dict[str, float]) -> Phase:
        d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("keys", "commit_s", *KINDS)}
        return cls(name, int(d["keys"]), d["commit_s"], {k: int(d[k]) for k in KINDS})


@dataclass
class ServiceCommit:
    """A topic of ``keys`` records per round and the word-count service committing it to Cassandra."""

    cluster: Any  # MockKafkaCluster
    settings: CassandraSettings
    keys: int
    workdir: Path
    partitions: int = 4
    max_pending: int = 2
    spark: dict[str, Any] = field(default_factory=lambda: {"master": "local[2]"})  # the config's spark section
    env: dict[str, str] | None = None  # the service process's environment on top of this one's

    def __post_init__(self) -> None:
        if self.keys % self.partitions:
            raise ValueError("keys must be a multiple of partitions (each txid is exactly one round)")
        self.pipeline = f"commit-{uuid.uuid4().hex[:8]}"
        self.topic, self.produced = self.pipeline, 0
        self.cluster.create_topic(self.topic, self.partitions)
        self.port = free_port()
        s = self.settings
        doc = {
            "kafka": {"bootstrap_servers": self.cluster.bootstrap_servers()},
            "spark": self.spark,  # the service's own partitioning: a commit task per core
            "http": {"host": "127.0.0.1", "port": self.port},
            "cassandra": {"contact_points": list(s.contact_points), "port": s.port, "keyspace": s.keyspace,
                          "local_dc": s.local_dc, "max_concurrency": s.max_concurrency},
            "pipelines": [{
                "id": self.pipeline,
                "spout": {"topics": [self.topic], "first_poll": "earliest", "discovery_interval_s": 1,
                          "caps": {"per_partition": self.keys // self.partitions, "per_batch": self.keys}},
                "transforms": [{"map": ["CAST(value AS STRING) AS word"]}],
                "group_by": ["word"],
                "aggregates": [{"count": {"as": "count"}}],
                "state": {"backend": "cassandra", "table": self.pipeline.replace("-", "_")},
                "max_pending": self.max_pending,
                "idle_sleep_s": 0.1,
            }],
        }
        self.config = self.workdir / f"{self.pipeline}.yaml"
        self.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.service = ServiceProcess(self.config, self.workdir / f"{self.pipeline}.log", self.port, self.env)

    def produce(self, rounds: int, records: int | None = None) -> None:
        """``rounds`` rounds of every key, or the next ``records`` records of the rounds' sequence."""
        start, self.produced = self.produced, self.produced + (rounds * self.keys if records is None else records)
        batch = [(i % self.partitions, f"k{i % self.keys}".encode()) for i in range(start, self.produced)]
        produce(self.cluster.bootstrap_servers(), self.topic, batch)

    def run(self, rounds: int) -> list[Phase]:
        """New keys (round 1), ``rounds - 1`` steady rounds, then one cold round after a restart."""
        phases = []
        try:
            self.produce(rounds)  # all there before the first plan: each txid is exactly one round
            self.service.start()  # ready only after its first step: wait for the commit instead
            start = self.wait_committed(1)
            phases.append(Phase.between("new keys (txid 1)", {}, start))
            steady = self.wait_committed(rounds)
            phases.append(Phase.between(f"steady ({rounds - 1} txids)", start, steady))
            assert self.service.terminate() == 0
            self.produce(1)
            self.service.start()
            phases.append(Phase.between("cold cache after a restart", {}, self.wait_committed(rounds + 1)))
            assert self.service.terminate() == 0
        finally:
            self.service.cleanup()
        return phases

    def wait_committed(self, txid: int, timeout: float = 1800.0, counter: str = "committed_txid") -> dict[str, float]:
        """The service's counters once it has committed ``txid`` (or once ``counter`` reached that value)."""
        deadline = time.monotonic() + timeout
        while True:
            self.service.check_alive()
            try:
                values = self.scrape()
            except OSError:  # not listening yet
                values = {}
            if values.get(counter, 0) >= txid:
                return values
            if time.monotonic() > deadline:
                raise TimeoutError(f"txid {txid} not committed after {timeout} s; see {self.service.log}")
            time.sleep(0.25)

    def scrape(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.labels.get("pipeline") != self.pipeline:
                    continue
                if s.name == "trident_committed_txid":
                    out["committed_txid"] = s.value
                elif s.name == "trident_keys_updated_total":
                    out["keys"] = out.get("keys", 0.0) + s.value
                elif s.name == "trident_phase_seconds_sum" and s.labels.get("phase") == "commit":
                    out["commit_s"] = s.value
                elif s.name == "trident_cas_conflicts_total":
                    out["conflicts"] = out.get("conflicts", 0.0) + s.value
                elif s.name == "trident_state_requests_total" and s.labels.get("kind") in KINDS:
                    out[s.labels["kind"]] = out.get(s.labels["kind"], 0.0) + s.value
        return out


@dataclass(frozen=True)
class Round:
    """One txid of the stable key set: keys committed, requests the server got for the table, commit seconds."""

    keys: int
    reads: int
    lwts: int
    serial_reads: int
    commit_s: float

    @property
    def requests_per_key(self) -> float:
        return (self.reads + self.lwts + self.serial_reads) / self.keys


@dataclass
class StableKeys:
    """A topic whose every ``keys`` records (one per key) make one txid, and the pipeline counting them."""

    cluster: Any
    settings: CassandraSettings
    keys: int
    partitions: int = 4
    table: str = field(default_factory=lambda: f"commit_{uuid.uuid4().hex[:8]}")
    produced: int = 0
    per_partition: int = 0  # the txids' cap per partition (0: a round's share of each partition)

    def __post_init__(self) -> None:
        if self.keys % self.partitions:
            raise ValueError("keys must be a multiple of partitions (each txid is exactly one round)")
        self.topic = f"commit-{uuid.uuid4().hex[:10]}"
        self.cluster.create_topic(self.topic, self.partitions)

    def produce(self, rounds: int, partition: int | None = None) -> None:
        """``rounds`` rounds of every key, spread over the partitions or all in ``partition``."""
        start, self.produced = self.produced, self.produced + rounds * self.keys
        records = [(i % self.partitions if partition is None else partition, f"k{i % self.keys}".encode())
                   for i in range(start, self.produced)]
        produce(self.cluster.bootstrap_servers(), self.topic, records)

    def run(self, spark: Any, rounds: int, *, driver_keys_by_round: Sequence[int] = (), **executor: Any) -> list[Round]:
        """Commit ``rounds`` txids (produced beforehand) one at a time; one :class:`Round` each.
        ``driver_keys_by_round``: the executor's driver-side commit threshold before each round (then kept)."""
        name = self.table
        spout = KafkaSpout(config(self.cluster.bootstrap_servers(), topics=[self.topic]), name)
        factory = StateFactory(backend="cassandra", cassandra=self.settings)
        topology = Topology(name)
        (topology.new_stream(spout).map("CAST(value AS STRING) AS word")
         .group_by("word").persistent_aggregate(factory, Count(), output="count", name=self.table))
        metrics = Metrics(CollectorRegistry())
        ex = SparkExecutor(spark, topology, metrics=metrics, **executor)
        caps = Caps(per_partition=self.per_partition or self.keys // self.partitions, per_batch=self.keys)
        coord = coordinator(topology, ex, factory.txstate_store(name), caps=caps, metrics=metrics)
        out = []
        try:
            for i in range(rounds):
                if i < len(driver_keys_by_round):
                    ex.commits.driver_keys = driver_keys_by_round[i]
                before = metrics.value("trident_phase_seconds_sum", pipeline=name, phase="commit")
                sent = [requests(metrics.registry, k) for k in ("read", "cas", "serial_read")]
                assert coord.run(max_batches=1) == 1
                reads, lwts, serial = (requests(metrics.registry, k) - n
                                       for k, n in zip(("read", "cas", "serial_read"), sent, strict=True))
                out.append(Round(coord.last_stats.keys_updated, reads, lwts, serial,
                                 metrics.value("trident_phase_seconds_sum", pipeline=name, phase="commit") - before))
        finally:
            coord.close()
            ex.close()
        return out


def requests(registry: CollectorRegistry, kind: str) -> int:
    """Cassandra requests of ``kind`` counted in ``registry``, summed over every other label."""
    return int(sum(s.value for m in registry.collect() for s in m.samples
                   if s.name == "trident_state_requests_total" and s.labels.get("kind") == kind))
