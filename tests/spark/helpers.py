"""Test data with an independent ground truth, topologies under test, and a coordinator harness."""

from __future__ import annotations

import json
import random
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.metrics import Metrics
from app.spark import SparkExecutor
from app.topology.topology import Agg, Stream, Topology
from spouts.kafka import KafkaSpout
from spouts.planner import Caps
from states import Count, Max, Sum
from states.factory import StateFactory
from tests.kafka.helpers import Produced, config, produce

WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "cat", "émigré")
USERS = 7


def sentences(n: int, partitions: int, seed: int = 1) -> list[tuple[int, bytes]]:
    """``n`` JSON records ``{"user", "amount", "text"}`` spread over ``partitions``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        doc = {"user": f"u{rng.randrange(USERS)}", "amount": rng.randint(-50, 1000),
               "text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))}
        out.append((i % partitions, json.dumps(doc).encode()))
    return out


def expected_words(records: Iterable[Produced]) -> dict[str, int]:
    """Word counts computed in plain Python from what was produced."""
    return dict(Counter(w for r in records for w in json.loads(r.value)["text"].split(" ")))


def expected_amounts(records: Iterable[Produced]) -> dict[str, tuple[int, int]]:
    """(sum, max) of ``amount`` per user, in plain Python."""
    out: dict[str, tuple[int, int]] = {}
    for r in records:
        doc = json.loads(r.value)
        s, m = out.get(doc["user"], (0, None))
        out[doc["user"]] = (s + doc["amount"], doc["amount"] if m is None else max(m, doc["amount"]))
    return out


def lines(topology: Topology, spout: KafkaSpout) -> Stream:
    return topology.new_stream(spout).map("CAST(value AS STRING) AS json")


def word_counts(stream: Stream, factory: StateFactory, name: str = "word_counts") -> Any:
    words = (stream.map("explode(split(get_json_object(json, '$.text'), ' ')) AS word")
             .filter("word <> ''"))
    return words.group_by("word").persistent_aggregate(factory, Count(), output="count", name=name)


def amounts(stream: Stream, factory: StateFactory, name: str = "amounts") -> Any:
    typed = stream.each("get_json_object(json, '$.user') AS user",
                        "CAST(get_json_object(json, '$.amount') AS BIGINT) AS amount")
    return typed.group_by("user").persistent_aggregate(
        factory, [Agg(Sum(), "total", "amount"), Agg(Max(), "largest", "amount")], name=name)


@dataclass
class Topic:
    """A fresh topic on the shared mock cluster and everything produced to it."""

    cluster: Any
    partitions: int = 3
    name: str = field(default_factory=lambda: f"spark-{uuid.uuid4().hex[:10]}")
    produced: list[Produced] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster.create_topic(self.name, self.partitions)

    def produce(self, n: int, seed: int = 1) -> list[Produced]:
        acked = produce(self.cluster.bootstrap_servers(), self.name, sentences(n, self.partitions, seed))
        self.produced += acked
        return acked

    def spout(self, topology_id: str) -> KafkaSpout:
        return KafkaSpout(config(self.cluster.bootstrap_servers(), topics=[self.name]), topology_id)


class Timed:
    """An executor wrapper recording when each process started and each commit ended (overlap checks)."""

    def __init__(self, inner: SparkExecutor) -> None:
        self.inner = inner
        self.events: list[Any] = []

    def state_kinds(self) -> list[Any]:
        return self.inner.state_kinds()

    def process(self, batch: Any) -> Any:
        self.events.append(("process_start", batch.txid, time.monotonic()))
        return self.inner.process(batch)

    def commit(self, batch: Any, processed: Any) -> Any:
        stats = self.inner.commit(batch, processed)
        self.events.append(("commit_end", batch.txid, time.monotonic()))
        return stats

    def cancel(self, txid: int) -> None:
        self.inner.cancel(txid)

    def close(self) -> None:
        self.inner.close()


def coordinator(topology: Topology, executor: Any, store: Any, *, caps: Caps, max_pending: int = 1,
                metrics: Metrics | None = None) -> Coordinator:
    cfg = CoordinatorConfig(caps=caps, max_pending=max_pending, retry_backoff_s=(0.01, 0.1), idle_sleep_s=0.01,
                            owner="test")
    assert topology.spout is not None
    return Coordinator(topology.name, topology.spout, executor, store, cfg,
                       metrics=metrics or Metrics(CollectorRegistry()))


def sqlite_table(path: Any, table: str, keys: Sequence[str], values: Sequence[str]) -> dict[Any, Any]:
    """Current values of a table, read with sqlite3: ``{key (scalar or tuple): value (scalar or tuple)}``."""
    conn = sqlite3.connect(str(path))
    try:
        rows = conn.execute(f"SELECT {', '.join([*keys, *values])} FROM {table}").fetchall()
    finally:
        conn.close()
    return {_one(r[:len(keys)]): _one(r[len(keys):]) for r in rows}


def _one(t: tuple[Any, ...]) -> Any:
    return t[0] if len(t) == 1 else t


def py4j_calls(spark: Any, build: Callable[[], Any]) -> tuple[int, Any]:
    """The py4j calls the driver makes to the JVM while ``build()`` runs (not counting py4j releasing objects
    Python collected), and what it returned."""
    import gc

    from py4j.protocol import MEMORY_COMMAND_NAME

    client = type(spark.sparkContext._gateway._gateway_client)
    send, sent = client.send_command, [0]

    def counted(self: Any, command: str, *args: Any, **kwargs: Any) -> Any:
        if not command.startswith(MEMORY_COMMAND_NAME):
            sent[0] += 1
        return send(self, command, *args, **kwargs)

    gc.collect()  # objects collected later would be released inside the count
    client.send_command = counted
    try:
        built = build()
    finally:
        client.send_command = send
    return sent[0], built
