"""Dead letters: a txid's bad records written to a Kafka topic, once per source record across replays and crashes.

A dead letter is the source record as it was (key, value, headers, timestamp) plus headers naming
where it came from and why it was refused (:data:`HEADERS`). Per txid, after its plan is frozen and
before any of its state is written:

1. The pipeline's transactional producer (``transactional.id`` = ``trident-dead-letters-<pipeline>``)
   is initialised once per process: Kafka fences every earlier producer of the pipeline (a zombie
   that lost its lease, a killed process) and aborts its open transaction.
2. The first attempt of the txid records the dead-letter topic's end offsets in the coordinator's
   store (fenced by the lease epoch) before it produces anything; a replay finds that record.
3. The topic is read back (``read_committed``) from those offsets: the source coordinates already
   there for this pipeline were written by an earlier attempt whose transaction committed.
4. The rest are read again from the source (by their coordinates) and produced in one Kafka
   transaction, committed before the txid's state is written.

So a dead letter is produced by every attempt until one attempt's transaction commits, and never
after: exactly once per source record. Why not dead letters keyed by coordinates and left for
consumers to deduplicate: every consumer of the topic would then have to know to do that.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from app.failures.errors import BadRecordsGoneError
from spouts.bad_records import BadRecord
from spouts.kafka.access import AccessWatch, refused, serve, watched
from spouts.metadata import PartitionMetadata
from spouts.protocols import PartitionedSpout, Record

log = logging.getLogger(__name__)

PREFIX = "trident."
#: Headers added to every dead letter (after the record's own headers).
HEADERS = ("source.topic", "source.partition", "source.offset", "source.timestamp", "pipeline", "stage",
           "error.class", "error.message")
Coordinates = tuple[str, int, int]


class DeadLetterStarts(Protocol):
    """Where a txid's dead letters start, kept in the pipeline's store (the coordinator's progress log)."""

    def dead_letter_start(self, txid: int) -> dict[int, int] | None: ...

    def store_dead_letter_start(self, txid: int, start: Mapping[int, int]) -> None: ...


def coordinates_of(headers: Sequence[tuple[str, bytes | None]] | None) -> tuple[str | None, Coordinates | None]:
    """The pipeline and source coordinates a dead letter's headers name (None where absent)."""
    h = {k: v for k, v in headers or () if k.startswith(PREFIX) and v is not None}
    pipeline = h.get(PREFIX + "pipeline")
    try:
        coords = (h[PREFIX + "source.topic"].decode(), int(h[PREFIX + "source.partition"]),
                  int(h[PREFIX + "source.offset"]))
    except (KeyError, ValueError):
        return (pipeline.decode() if pipeline else None), None
    return (pipeline.decode() if pipeline else None), coords


def letter_headers(pipeline: str, record: Record, bad: BadRecord) -> list[tuple[str, bytes]]:
    """The record's own headers plus where it came from and why it is a dead letter."""
    own = [(k, v if v is not None else b"") for k, v in record.headers]
    ours = {"source.topic": record.topic, "source.partition": str(record.partition),
            "source.offset": str(record.offset), "source.timestamp": str(record.timestamp), "pipeline": pipeline,
            "stage": bad.stage.value, "error.class": bad.reason, "error.message": bad.message[:2000]}
    return own + [(PREFIX + k, ours[k].encode()) for k in HEADERS]


class DeadLetterWriter:
    """Writes one pipeline's dead letters to ``topic`` (see the module docstring for the protocol).

    ``spout`` re-reads the bad records by their coordinates; ``kafka``: librdkafka settings of the
    dead-letter cluster (``bootstrap.servers`` and any security settings).
    """

    def __init__(self, pipeline: str, topic: str, spout: PartitionedSpout, kafka: Mapping[str, str], *,
                 timeout_s: float = 30.0) -> None:
        self.pipeline, self.topic, self.spout, self.timeout_s = pipeline, topic, spout, timeout_s
        self.kafka = dict(kafka)
        self._producer: Producer | None = None
        self._watch: AccessWatch | None = None

    @classmethod
    def for_spout(cls, pipeline: str, topic: str, spout: Any) -> DeadLetterWriter:
        """A writer to the cluster the (Kafka) spout reads, with its connection properties."""
        cfg = spout.config
        return cls(pipeline, topic, spout, {**cfg.properties, "bootstrap.servers": cfg.bootstrap_servers},
                   timeout_s=max(30.0, cfg.request_timeout_s))

    def write(self, txid: int, bad: Sequence[BadRecord], progress: DeadLetterStarts) -> int:
        """Make sure every record of ``bad`` is in the topic once; returns how many were produced now.

        A refusal (credentials, certificate, a missing ACL on the topic or the transactional id) raises
        :class:`~spouts.errors.AccessRefusedError` naming the object: permanent, never ridden out."""
        try:
            return self._write(txid, bad, progress)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            what = (f"transactional id {self.transactional_id}"
                    if isinstance(err, KafkaError) and err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                    else f"dead-letter topic {self.topic}")
            found = refused(err if isinstance(err, KafkaError) else None, self.kafka, what)
            if found is None and self._watch is not None:
                if self._producer is not None:
                    serve(self._producer)
                found = self._watch.refusal
            if found is not None:
                raise found from e
            raise

    @property
    def transactional_id(self) -> str:
        return f"trident-dead-letters-{self.pipeline}"

    def _write(self, txid: int, bad: Sequence[BadRecord], progress: DeadLetterStarts) -> int:
        producer = self._ready_producer()
        start = progress.dead_letter_start(txid)
        if start is None:
            start = self._end_offsets(producer)
            progress.store_dead_letter_start(txid, start)
        present = self._present(start)
        missing = [b for b in bad if (b.topic, b.partition, b.offset) not in present]
        if not missing:
            return 0
        records = self._source_records(missing)
        try:
            producer.begin_transaction()
            for b in missing:
                r = records[(b.topic, b.partition, b.offset)]
                kwargs: dict[str, Any] = {"key": r.key, "value": r.value,
                                          "headers": letter_headers(self.pipeline, r, b)}
                if r.timestamp > 0:
                    kwargs["timestamp"] = r.timestamp
                producer.produce(self.topic, **kwargs)
            producer.commit_transaction(self.timeout_s)
        except KafkaException as e:
            self._after_error(producer, e)
            raise
        return len(missing)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None

    # -- steps ---------------------------------------------------------------------------------

    def _ready_producer(self) -> Producer:
        if self._producer is None:
            conf, self._watch = watched({**self.kafka, "transactional.id": self.transactional_id,
                                         "enable.idempotence": "true",
                                         "client.id": f"trident-{self.pipeline}-dead-letters"})
            producer = Producer(conf)
            try:
                producer.init_transactions(self.timeout_s)  # fences earlier producers, aborts their open transaction
            except KafkaException:
                serve(producer)  # the error callback learns of a refused credential or certificate
                raise
            self._producer = producer
        return self._producer

    def _after_error(self, producer: Producer, e: KafkaException) -> None:
        err = e.args[0] if e.args else None
        if isinstance(err, KafkaError) and err.txn_requires_abort():
            try:
                producer.abort_transaction(self.timeout_s)
            except KafkaException:
                pass
            else:
                return
        self._producer = None  # fatal (fenced) or unknown: start over with a new producer next attempt

    def _consumer(self) -> Consumer:
        conf, _ = watched({**self.kafka, "group.id": f"trident-{self.pipeline}-dead-letters",
                           "isolation.level": "read_committed", "enable.auto.commit": "false",
                           "enable.partition.eof": "true", "auto.offset.reset": "earliest"})
        return Consumer(conf)  # its requests carry a missing ACL; the watch is for librdkafka's log

    def _partitions(self, client: Any) -> list[int]:
        topic = client.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                            f"dead-letter topic {self.topic!r} does not exist"))
        return sorted(topic.partitions)

    def _end_offsets(self, producer: Producer) -> dict[int, int]:
        consumer = self._consumer()
        try:
            return {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=self.timeout_s)[1]
                    for p in self._partitions(producer)}
        finally:
            consumer.close()

    def _present(self, start: Mapping[int, int]) -> set[Coordinates]:
        """The source coordinates of this pipeline's committed dead letters after ``start``."""
        consumer = self._consumer()
        found: set[Coordinates] = set()
        try:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=self.timeout_s)[1]
                    for p in self._partitions(consumer)}
            todo = {p: start.get(p, 0) for p, end in ends.items() if start.get(p, 0) < end}
            if not todo:
                return found
            consumer.assign([TopicPartition(self.topic, p, o) for p, o in todo.items()])
            deadline = time.monotonic() + self.timeout_s
            while todo:
                if time.monotonic() > deadline:
                    msg = (
                        f"dead-letter topic {self.topic!r}: could not read back to its end "
                        f"(an open transaction?); still at {todo}"
                    )
                    raise TimeoutError(msg)
                for m in consumer.consume(500, timeout=0.2):
                    p, offset, err = m.partition() or 0, m.offset() or 0, m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF and offset >= ends.get(p, 0):  # librdkafka's local error codes are public, named with a leading underscore
                            todo.pop(p, None)
                        continue
                    pipeline, coords = coordinates_of(_headers(m))
                    if pipeline == self.pipeline and coords is not None:
                        found.add(coords)
                    if offset + 1 >= ends.get(p, 0):
                        todo.pop(p, None)
            return found
        finally:
            consumer.close()

    def _source_records(self, bad: Sequence[BadRecord]) -> dict[Coordinates, Record]:
        """The bad records as the source holds them, read by their coordinates."""
        wanted: dict[tuple[str, int], set[int]] = {}
        for b in bad:
            wanted.setdefault((b.topic, b.partition), set()).add(b.offset)
        emitter = self.spout.emitter()
        out: dict[Coordinates, Record] = {}
        try:
            for (topic, partition), offsets in wanted.items():
                lo, hi = min(offsets), max(offsets) + 1
                meta = PartitionMetadata(topic, partition, lo, hi, hi - lo, self.pipeline)
                for r in emitter.emit_partition(meta):
                    if r.offset in offsets:
                        out[(topic, partition, r.offset)] = r
        finally:
            emitter.close()
        lost = [b.coordinates for b in bad if (b.topic, b.partition, b.offset) not in out]
        if lost:
            raise BadRecordsGoneError(lost)
        return out


def _headers(message: Any) -> list[tuple[str, bytes | None]]:
    return [(k, v if v is None or isinstance(v, bytes) else str(v).encode()) for k, v in message.headers() or ()]
