"""The dead-letter writer's exactly-once rule, fast (no Spark, no broker): a txid's bad records land in the
topic once although the txid is written twice and a producer dies between its transaction's begin and commit.

Kafka is an in-memory fake with the semantics the rule relies on: a transactional producer's records
are visible to ``read_committed`` consumers once committed; ``init_transactions`` by the same
``transactional.id`` aborts the open transaction of an earlier producer (fencing it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError

from app.bad_records import dead_letters
from app.bad_records.dead_letters import DeadLetterWriter, coordinates_of
from app.coordinator.progress import ProgressLog
from spouts.bad_records import BadRecord, Stage
from spouts.metadata import PartitionMetadata
from spouts.protocols import Record
from states.memory.txstate import MemoryTransactionalStateStore

DLQ = "sales-dead"


class Killed(BaseException):
    """The process dies here."""


@dataclass
class Entry:
    value: bytes | None
    headers: list[tuple[str, bytes]]
    txn: int
    state: str = "open"  # open | committed | aborted


@dataclass
class FakeKafka:
    """One dead-letter topic of one partition, with transactions by ``transactional.id``."""

    log: list[Entry] = field(default_factory=list)
    open_txn: dict[str, int] = field(default_factory=dict)  # transactional.id -> its open transaction
    next_txn: int = 0

    def finish(self, txn: int, state: str) -> None:
        for e in self.log:
            if e.txn == txn and e.state == "open":
                e.state = state


@dataclass
class Message:
    entry: Entry | None
    at: int

    def error(self) -> Any:
        return None if self.entry is not None else KafkaError(KafkaError._PARTITION_EOF)

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at

    def headers(self) -> list[tuple[str, bytes]]:
        assert self.entry is not None
        return self.entry.headers


class FakeProducer:
    def __init__(self, kafka: FakeKafka, conf: dict[str, str]) -> None:
        self.kafka, self.id = kafka, conf["transactional.id"]

    def init_transactions(self, timeout: float) -> None:
        txn = self.kafka.open_txn.pop(self.id, None)
        if txn is not None:  # fences the earlier producer of this id: its transaction is aborted
            self.kafka.finish(txn, "aborted")

    def begin_transaction(self) -> None:
        self.kafka.next_txn += 1
        self.kafka.open_txn[self.id] = self.kafka.next_txn

    def produce(self, topic: str, key: bytes | None = None, value: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, timestamp: int = 0) -> None:
        assert topic == DLQ
        self.kafka.log.append(Entry(value, headers or [], self.kafka.open_txn[self.id]))

    def commit_transaction(self, timeout: float) -> None:
        self.kafka.finish(self.kafka.open_txn.pop(self.id), "committed")

    def list_topics(self, topic: str, timeout: float) -> Any:
        return _Metadata()

    def flush(self, timeout: float) -> int:
        return 0

    def poll(self, timeout: float = 0) -> int:
        return 0


class _Metadata:
    @property
    def topics(self) -> dict[str, Any]:
        return {DLQ: type("T", (), {"error": None, "partitions": {0: None}})()}


class FakeConsumer:
    """A ``read_committed`` consumer: stops before the first record of an open transaction."""

    def __init__(self, kafka: FakeKafka, conf: dict[str, str]) -> None:
        assert conf["isolation.level"] == "read_committed"
        self.kafka, self.at = kafka, 0

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, len(self.kafka.log)

    def list_topics(self, topic: str, timeout: float) -> Any:
        return _Metadata()

    def assign(self, parts: list[Any]) -> None:
        self.at = parts[0].offset

    def consume(self, n: int, timeout: float) -> list[Message]:
        out: list[Message] = []
        while self.at < len(self.kafka.log) and len(out) < n:
            e = self.kafka.log[self.at]
            if e.state == "open":
                return out
            if e.state == "committed":
                out.append(Message(e, self.at))
            self.at += 1
        return [*out, Message(None, self.at)]

    def close(self) -> None:
        pass


class SourceSpout:
    """The source topic ``sales`` (partition 0, offsets 0-9) as the writer re-reads it."""

    def emitter(self) -> Any:
        return self

    def emit_partition(self, meta: PartitionMetadata) -> Iterator[Record]:
        for o in range(meta.first_offset, meta.next_offset):
            yield Record("sales", 0, o, None, f"record {o}".encode(), 1_000 + o)

    def close(self) -> None:
        pass


@pytest.fixture
def kafka(monkeypatch: Any) -> FakeKafka:
    k = FakeKafka()
    monkeypatch.setattr(dead_letters, "Producer", lambda conf: FakeProducer(k, conf))
    monkeypatch.setattr(dead_letters, "Consumer", lambda conf: FakeConsumer(k, conf))
    return k


def committed_letters(kafka: FakeKafka) -> list[tuple[str, int, int]]:
    out = []
    for e in kafka.log:
        if e.state == "committed":
            _, coords = coordinates_of(e.headers)
            assert coords is not None
            out.append(coords)
    return out


def test_each_letter_is_written_once_across_a_second_write_and_a_producer_killed_before_its_commit(
        kafka: FakeKafka) -> None:
    """Txid 1's three bad records: a writer dies after producing them, before committing; a new writer (a
    restart) writes the txid, then writes it again (a replay after a later failure): each record is in
    the topic exactly once, committed."""
    bad = [BadRecord("sales", 0, o, Stage.TRANSFORM, "CAST_INVALID_INPUT", "bad amount") for o in (2, 5, 7)]
    store = MemoryTransactionalStateStore("sales")
    progress = ProgressLog(store, epoch=store.acquire_lease("a", 60))

    dying = DeadLetterWriter("sales", DLQ, SourceSpout(), {})  # type: ignore[arg-type]
    producer = dying._ready_producer()

    def die(timeout: float) -> None:
        raise Killed

    setattr(producer, "commit_transaction", die)  # noqa: B010 - the producer dies at its commit
    with pytest.raises(Killed):
        dying.write(1, bad, progress)
    assert len(kafka.log) == 3
    assert committed_letters(kafka) == []  # produced, never committed

    restarted = DeadLetterWriter("sales", DLQ, SourceSpout(), {})  # type: ignore[arg-type]
    assert restarted.write(1, bad, progress) == 3
    assert restarted.write(1, bad, progress) == 0  # the replay finds them in the topic
    assert committed_letters(kafka) == [("sales", 0, 2), ("sales", 0, 5), ("sales", 0, 7)]


@pytest.mark.parametrize(("code", "where", "named"), [
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "commit_transaction", f"dead-letter topic {DLQ}"),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "init_transactions", "transactional id trident-dead-letters-sales"),
])
def test_a_missing_acl_is_an_authorization_refusal_naming_the_object(kafka: FakeKafka, monkeypatch: Any, code: int,
                                                                    where: str, named: str) -> None:
    from confluent_kafka import KafkaException

    from spouts.errors import AccessRefusedError

    def refuse(self: FakeProducer, *args: Any) -> None:
        raise KafkaException(KafkaError(code, "Broker: not authorized"))

    monkeypatch.setattr(FakeProducer, where, refuse)
    bad = [BadRecord("sales", 0, 2, Stage.TRANSFORM, "CAST_INVALID_INPUT", "bad amount")]
    store = MemoryTransactionalStateStore("sales")
    progress = ProgressLog(store, epoch=store.acquire_lease("a", 60))
    writer = DeadLetterWriter("sales", DLQ, SourceSpout(), {"bootstrap.servers": "b:9093",  # type: ignore[arg-type]
                                                           "sasl.username": "trident", "sasl.password": "s3cret"})
    with pytest.raises(AccessRefusedError) as raised:
        writer.write(1, bad, progress)
    line = str(raised.value)
    assert line.startswith(f"authorization refused by Kafka at b:9093 for principal User:trident: {named}")
    assert "s3cret" not in line
    assert committed_letters(kafka) == []
