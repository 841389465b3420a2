"""The bench's workload: short sentences on a topic (4 partitions unless asked) of librdkafka's mock cluster or a real Kafka, and the machine's load.

Every system of a run reads the same topic from its start: the raw consume loop, Quix Streams and
the product. A word count over 1000 distinct words (3-8 words a sentence).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition

from spouts.kafka import KafkaSpoutConfig
from spouts.metadata import PartitionMetadata
from tests.kafka.fixtures import KafkaPeer

PARTITIONS = 4
VOCABULARY = [f"w{i}" for i in range(1000)]


def load() -> str:
    """The machine's load average (1/5/15 min) and cores: every figure is quoted with it."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


@dataclass
class Topic:
    """A topic filled with ``records`` sentences, round robin over its partitions."""

    cluster: KafkaPeer
    name: str
    records: int = 0
    words: int = 0
    value_bytes: int = 0
    partitions: int = PARTITIONS
    #: what was produced, in order: (seed, sentences) of generated runs, (partition, value) of single records
    history: list[tuple[int, int] | tuple[int, bytes]] = field(default_factory=list)

    @classmethod
    def filled(cls, cluster: KafkaPeer, name: str, records: int, seed: int = 1,
               partitions: int = PARTITIONS) -> Topic:
        cluster.create_topic(name, partitions, 1)
        topic = cls(cluster, name, partitions=partitions)
        topic.produce(records, seed)
        return topic

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers()

    def produce(self, records: int, seed: int = 1) -> None:
        self.history.append((seed, records))
        rng = random.Random(seed)
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20, "batch.num.messages": 10_000,
                      "queue.buffering.max.messages": 1_000_000})
        for i in range(records):
            words = rng.choices(VOCABULARY, k=rng.randint(3, 8))
            value = " ".join(words).encode()
            self.words += len(words)
            self.value_bytes += len(value)
            p.produce(self.name, value, partition=(self.records + i) % self.partitions)
            if i % 50_000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        self.records += records

    def append(self, value: bytes, partition: int = 0) -> None:
        """One more record, flushed."""
        p = Producer({"bootstrap.servers": self.bootstrap})
        p.produce(self.name, value, partition=partition)
        assert p.flush(10) == 0
        self.history.append((partition, value))
        self.records += 1
        self.words += len(value.split())
        self.value_bytes += len(value)

    def truth(self, ends: Mapping[int, int] | None = None, starts: Mapping[int, int] | None = None) -> Counter[str]:
        """The word counts of the records at offsets ``starts[p]`` (0 if absent) up to ``ends[p]`` (the end
        if ``ends`` is None, 0 if absent) of each partition p, regenerated from what was produced (offsets
        of a partition are consecutive: no transactions, no compaction)."""
        counts: Counter[str] = Counter()
        offsets = [0] * self.partitions
        produced = 0

        def take(partition: int, words: list[str]) -> None:
            offset = offsets[partition]
            offsets[partition] += 1
            if (starts or {}).get(partition, 0) <= offset and (ends is None or offset < ends.get(partition, 0)):
                counts.update(words)

        for what, n in self.history:
            if isinstance(n, bytes):
                take(what, n.decode().split(" "))
                produced += 1
                continue
            rng = random.Random(what)
            first = produced
            for i in range(n):
                take((first + i) % self.partitions, rng.choices(VOCABULARY, k=rng.randint(3, 8)))
            produced += n
        return counts

    def ranges(self) -> list[PartitionMetadata]:
        """Every partition's whole range; raises when the mock dropped the oldest records (its log is bounded)."""
        consumer = Consumer(KafkaSpoutConfig(self.bootstrap, topics=(self.name,)).consumer_config("bench-ranges"))
        try:
            metas = []
            for p in range(self.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(self.name, p), timeout=10)
                if low != 0:
                    raise RuntimeError(f"the mock dropped records of partition {p}: use fewer records")
                metas.append(PartitionMetadata(self.name, p, low, high, high - low, "bench"))
            assert sum(m.record_count for m in metas) == self.records
            return metas
        finally:
            consumer.close()
