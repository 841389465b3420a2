"""Producing test data with a ground truth, and short-timeout spout settings for tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from confluent_kafka import Producer

from spouts.kafka import KafkaSpoutConfig
from spouts.metadata import Partition


@dataclass(frozen=True)
class Produced:
    """One record as the broker acknowledged it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int


def produce(bootstrap: str, topic: str, values: Iterable[tuple[int, bytes]], *, key: bytes | None = None,
            timestamps: Sequence[int] | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
            ) -> list[Produced]:
    """Produce ``(partition, value)`` pairs and return what was acknowledged, in offset order."""
    acked: list[Produced] = []
    errors: list[Any] = []

    def on_delivery(sent_ts: int | None, err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:  # the timestamp sent, if any (the mock acknowledges with a fixed log-append time)
            acked.append(Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                  msg.timestamp()[1] if sent_ts is None else sent_ts))

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i, (partition, value) in enumerate(values):
        ts = None if timestamps is None else timestamps[i]
        kwargs: dict[str, Any] = {"partition": partition, "key": key, "on_delivery": partial(on_delivery, ts)}
        if ts is not None:
            kwargs["timestamp"] = ts
        if headers is not None:
            kwargs["headers"] = list(headers)
        while True:
            try:
                p.produce(topic, value, **kwargs)
                break
            except BufferError:  # librdkafka's local queue is full: let deliveries drain it
                p.poll(0.1)
        if i % 10_000 == 9_999:
            p.poll(0)
    left = p.flush(30)
    assert left == 0, (left, errors)
    assert not errors, (left, errors)
    return sorted(acked, key=lambda r: (r.partition, r.offset))


def spread(n: int, partitions: int, tag: str = "v", words: int = 7) -> list[tuple[int, bytes]]:
    """``n`` values over ``partitions`` partitions round-robin; values repeat over ``words`` words."""
    return [(i % partitions, f"{tag}{i % words}".encode()) for i in range(n)]


def truth(records: Iterable[Produced]) -> Counter[str]:
    """Expected counts per value."""
    return Counter(r.value.decode() for r in records)


def config(bootstrap: str, *, topics: Sequence[str] = (), **kw: Any) -> KafkaSpoutConfig:
    """Spout settings with test-sized timeouts."""
    base = KafkaSpoutConfig(bootstrap, topics=tuple(topics), topic_pattern=kw.pop("topic_pattern", None),
                            request_timeout_s=2.0, read_timeout_s=3.0, discovery_interval_s=0.0)
    return replace(base, **kw)


def parts(topic: str, n: int) -> list[Partition]:
    return [Partition(topic, i) for i in range(n)]
