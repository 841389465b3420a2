"""The Kafka spouts: opaque (default) and transactional, over explicitly assigned partitions.

Construct with a :class:`KafkaSpoutConfig` and the topology id; the spout is plain picklable data
(shipped to Spark executors), clients are created lazily where they are used.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from spouts.bad_records import OnBad
from spouts.kafka.arrow import DEFAULT_BATCH_SIZE, SCHEMA, read_path
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.discovery import KafkaCoordinator
from spouts.kafka.emitter import KafkaEmitter
from spouts.kafka.formats import BYTES, BatchDecoder, decoded_schema, resolve
from spouts.metadata import PartitionMetadata
from spouts.metrics import SpoutMetrics
from spouts.protocols import SpoutKind


class KafkaSpout:
    """An opaque partitioned Kafka spout: an unreadable partition gets an empty range and the batch goes on.

    An :class:`~spouts.protocols.ArrowSpout`: Spark executors read its ranges with :meth:`read_arrow`.
    """

    kind: SpoutKind = SpoutKind.OPAQUE

    def __init__(self, config: KafkaSpoutConfig, topology_id: str, metrics: SpoutMetrics | None = None) -> None:
        self.config, self.topology_id, self.metrics = config, topology_id, metrics
        self._decoder: BatchDecoder | None = None

    def coordinator(self) -> KafkaCoordinator:
        return KafkaCoordinator(self.config, self.topology_id)

    def emitter(self) -> KafkaEmitter:
        return KafkaEmitter(self.config, self.topology_id, self.kind, self.metrics)

    @property
    def decoder(self) -> BatchDecoder | None:
        """The key/value decoder (None: both formats are ``bytes``), resolved once.

        Registry formats fix their reader schema on first use, which is on the driver (Spark asks
        for :attr:`arrow_schema` before the first batch); the resolved decoder travels with the
        spout to the executors, so every task reads records as the same schema.
        """
        c = self.config
        if c.key_format == BYTES and c.value_format == BYTES:
            return None
        if self._decoder is None:
            key = resolve(c.key_format, c.topics, "key", c.schema_registry)
            value = resolve(c.value_format, c.topics, "value", c.schema_registry)
            self._decoder = BatchDecoder(key, value, decoded_schema(SCHEMA, key, value))
        return self._decoder

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of :meth:`read_arrow`'s batches: :data:`spouts.kafka.arrow.SCHEMA` with ``key`` and
        ``value`` typed by their formats (:mod:`spouts.kafka.formats`)."""
        decoder = self.decoder
        return SCHEMA if decoder is None else decoder.schema

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = DEFAULT_BATCH_SIZE,
                   on_bad: OnBad | None = None, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """``meta``'s records as Arrow batches (what Spark executors call), decoded by the formats, with
        ``columns`` only (None: all).

        A record whose key or value does not decode is left out and reported to ``on_bad`` (without
        it: BadRecordError); raw bytes are never bad. A key or value that may not decode is read and
        decoded even when ``columns`` leaves it out: a record is bad or good whatever is asked of it.
        """
        decoder = self.decoder
        if decoder is None:
            return self.emitter().read_arrow(meta, batch_size, columns)
        raw = self.emitter().read_arrow(meta, batch_size, decoder.raw_columns(columns))
        return (b for b in (decoder.decode(r, on_bad, columns) for r in raw) if b.num_rows)

    def describe_read(self, columns: Sequence[str] | None = None) -> str:
        """How a read of ``columns`` (None: all) reads its range: the native reader, or confluent-kafka's
        messages and why (:func:`spouts.kafka.arrow.read_path`)."""
        decoder = self.decoder
        return read_path(self.config.reader, columns if decoder is None else decoder.raw_columns(columns))

    def __getstate__(self) -> dict[str, object]:
        return {"config": self.config, "topology_id": self.topology_id, "metrics": None, "_decoder": self._decoder}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(topology_id={self.topology_id!r}, {self.config!r})"


class TransactionalKafkaSpout(KafkaSpout):
    """A transactional Kafka spout: a txid's ranges never change; an unreadable partition makes the batch wait."""

    kind = SpoutKind.TRANSACTIONAL
