"""The commit phase inside Spark: a stable key set, every key updated once per txid, into Cassandra.

Records ``k0 .. k<keys-1>`` are produced round after round over the topic's partitions, and the
coordinator's caps make each txid exactly one round, so every txid commits every key once. The
requests the executors sent (their metric deltas) and the commit-phase seconds are taken per txid.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology import Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count
from states.cassandra import CassandraSettings
from states.factory import StateFactory
from tests.kafka.helpers import config, produce
from tests.spark.helpers import coordinator


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

    def __post_init__(self) -> None:
        if self.keys % self.partitions:
            raise ValueError("keys must be a multiple of partitions (each txid is exactly one round)")
        self.topic = f"commit-{uuid.uuid4().hex[:10]}"
        self.cluster.create_topic(self.topic, self.partitions)

    def produce(self, rounds: int) -> None:
        start, self.produced = self.produced, self.produced + rounds * self.keys
        records = [(i % self.partitions, f"k{i % self.keys}".encode()) for i in range(start, self.produced)]
        produce(self.cluster.bootstrap_servers(), self.topic, records)

    def run(self, spark: Any, rounds: int, **executor: Any) -> list[Round]:
        """Commit ``rounds`` txids (produced beforehand) one at a time; one :class:`Round` each."""
        name = self.table
        spout = KafkaSpout(config(self.cluster.bootstrap_servers(), topics=[self.topic]), name)
        factory = StateFactory(backend="cassandra", cassandra=self.settings)
        topology = Topology(name)
        (topology.new_stream(spout).map("CAST(value AS STRING) AS word")
         .group_by("word").persistent_aggregate(factory, Count(), output="count", name=self.table))
        metrics = Metrics(CollectorRegistry())
        ex = SparkExecutor(spark, topology, metrics=metrics, **executor)
        caps = Caps(per_partition=self.keys // self.partitions, per_batch=self.keys)
        coord = coordinator(topology, ex, factory.txstate_store(name), caps=caps, metrics=metrics)
        out = []
        try:
            for _ in range(rounds):
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
