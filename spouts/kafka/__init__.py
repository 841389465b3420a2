"""Kafka partitioned spouts on confluent-kafka: discovery, planning, exact range reads, Arrow batches.

    config = KafkaSpoutConfig("broker:9092", topics=("events",))
    spout = KafkaSpout(config, "topology-1")            # opaque (default)
    spout = TransactionalKafkaSpout(config, "topology-1")

Modules: :mod:`.config` (settings), :mod:`.discovery` (coordinator side), :mod:`.emitter`
(planning and reading), :mod:`.reader` (the exact-range read loop), :mod:`.arrow` (Arrow batches
for Spark), :mod:`.consumers` (the per-process client pool), :mod:`.spout` (the spouts),
:mod:`.formats` (record formats: keys and values decoded into typed columns).
"""

from spouts.kafka.arrow import SCHEMA, read_arrow
from spouts.kafka.config import FirstPoll, KafkaSpoutConfig, redact
from spouts.kafka.consumers import POOL, ConsumerPool
from spouts.kafka.discovery import KafkaCoordinator
from spouts.kafka.emitter import KafkaEmitter
from spouts.kafka.spout import KafkaSpout, TransactionalKafkaSpout

__all__ = [
    "POOL",
    "SCHEMA",
    "ConsumerPool",
    "FirstPoll",
    "KafkaCoordinator",
    "KafkaEmitter",
    "KafkaSpout",
    "KafkaSpoutConfig",
    "TransactionalKafkaSpout",
    "read_arrow",
    "redact",
]
