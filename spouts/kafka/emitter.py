"""The emitter side of the Kafka spouts: plan a partition's next range, and read a planned range.

Resume trap: the next range starts at ``last.next_offset`` (exclusive end of the last *committed*
range), never ``+ 1``. A range ends at most ``max_records`` offsets later and never past the last
stable offset: in ``read_committed`` mode librdkafka's watermark query (ListOffsets with the
consumer's isolation level) returns the LSO as the high watermark, so open transactions are never
planned into a range. A plan fetches the watermarks of all its partitions at once (:meth:`KafkaEmitter.planning`),
and the ids of their topics (:mod:`spouts.kafka.topic_ids`): a range carries its topic's id, and a
stored position is resumed only in the log of the same id (docs/design.md, "Positions").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Message, TopicPartition

from spouts.errors import DataLossError, LogRestartedError, PartitionUnavailableError, TopicRecreatedError
from spouts.kafka.arrow import DEFAULT_BATCH_SIZE, read_arrow
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.consumers import POOL
from spouts.kafka.gc_pause import gc_paused
from spouts.kafka.reader import read_range
from spouts.kafka.topic_ids import TopicIds
from spouts.metadata import Partition, PartitionMetadata
from spouts.metrics import SPOUT_METRICS, SpoutMetrics
from spouts.protocols import DataLossPolicy, Record, SpoutKind

log = logging.getLogger(__name__)

#: An opaque spout logs a partition it skips at most this often (with the count of skips since).
SKIP_LOG_INTERVAL_S = 60.0


class KafkaEmitter:
    """Plans ranges from watermarks (driver) and reads them back exactly (driver or executor).

    Holds no client: consumers come from the per-process pool, so the emitter pickles as plain data.
    """

    def __init__(self, config: KafkaSpoutConfig, topology_id: str, kind: SpoutKind = SpoutKind.OPAQUE,
                 metrics: SpoutMetrics | None = None) -> None:
        self.config, self.topology_id, self.kind = config, topology_id, kind
        self.metrics = metrics
        self._skips: dict[Partition, tuple[float, int]] = {}  # last warning (monotonic), skips since
        self._seen: set[Partition] = set()  # partitions whose metric series exist
        self.last_data_loss: str | None = None  # the last loss skipped under policy skip, for /readyz
        self._prefetched: dict[Partition, tuple[int, int]] = {}  # watermarks fetched for the plan under way
        self._init_ids()

    def _init_ids(self) -> None:
        self.topic_ids = TopicIds(self.config, self.topology_id)  # driver only: opens its client when first asked
        self._prefetched_ids: dict[str, str] | None = None  # topic ids fetched for the plan under way
        self._adopted: set[str] = set()  # topics whose stored positions had no id, told once
        self._losses: set[Hashable] = set()  # losses counted once each: a re-creation's new id, a truncation's position

    def __getstate__(self) -> dict[str, object]:
        return {"config": self.config, "topology_id": self.topology_id, "kind": self.kind, "metrics": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._skips, self._seen, self.last_data_loss, self._prefetched = {}, set(), None, {}
        self._init_ids()

    def __repr__(self) -> str:
        return f"KafkaEmitter({self.kind.value}, topology_id={self.topology_id!r}, {self.config!r})"

    def _consumer_config(self, meta: PartitionMetadata) -> dict[str, str]:
        return self.config.consumer_config(self.topology_id, range_records=meta.next_offset - meta.first_offset)

    @property
    def _planning_config(self) -> dict[str, str]:
        return self.config.consumer_config(self.topology_id, role="plan")

    # -- planning ---------------------------------------------------------------------------

    @contextmanager
    def planning(self, partitions: Sequence[Partition]) -> Iterator[None]:
        """The watermarks of all ``partitions`` in bulk, for this plan's ``plan_partition`` calls only
        (:class:`spouts.protocols.PlansInBulk`): one plan at a time per emitter, as the coordinator plans.
        The ids of their topics are asked in one request sent before the watermark queries, and waited for after
        them, so the plan's cost grows by at most one round trip."""
        pending = self.topic_ids.ask([p.topic for p in partitions])
        self._prefetched = self._bulk_watermarks(partitions)
        self._prefetched_ids = pending.result()
        try:
            yield
        finally:
            self._prefetched, self._prefetched_ids = {}, None

    def _current_id(self, p: Partition) -> str | None:
        """The id of ``p``'s topic now (None: unknown), from the plan's bulk answer or asked alone."""
        ids = self._prefetched_ids if self._prefetched_ids is not None else self.topic_ids.now([p.topic])
        return ids.get(p.topic)

    def plan_partition(self, partition: Partition, last: PartitionMetadata | None,
                       max_records: int) -> PartitionMetadata | None:
        """The next range of ``partition`` after ``last``; see :class:`spouts.protocols.PartitionedEmitter`.

        First poll (``last`` is None, or a plain strategy and ``last`` stored by another topology
        id) starts from the configured strategy; otherwise at ``last.next_offset`` of the same log (see
        :meth:`_resume`). ``record_count``
        is the offset span unless ``exact_record_counts`` (then the range is read to count records:
        markers and aborted records make the span an upper bound). Sets the partition-lag gauge
        (end offset minus the committed next offset).
        """
        first_poll = last is None or (not self.config.first_poll.uncommitted and last.topology_id != self.topology_id)
        prefetched = self._prefetched.pop(partition, None)
        try:
            low, end = prefetched if prefetched is not None else self._watermarks(partition)
            current = self._current_id(partition)
            if first_poll or last is None:
                start, topic_id = self._first_offset(partition, low, end), current
            else:
                start, topic_id = self._resume(partition, last, current, low, end)
            stop = max(start, min(start + max_records, end))
            count = self._count(partition, start, stop) if self.config.exact_record_counts else stop - start
            self._publish_lag(partition, max(0, end - start))
        except PartitionUnavailableError as e:
            if self.kind is SpoutKind.TRANSACTIONAL:
                raise
            self._skipped(partition, e)
            return None if first_poll or last is None else last.empty_after()
        if self._skips.pop(partition, None) is not None:
            log.info("%s is readable again", partition.id)
        return PartitionMetadata(partition.topic, partition.partition, start, stop, count, self.topology_id, topic_id)

    def _resume(self, p: Partition, last: PartitionMetadata, current: str | None, low: int,
                end: int) -> tuple[int, str | None]:
        """Where to resume after ``last`` in the log whose id is ``current`` (None: unknown), and the id to store.

        * Another id than the stored one: the topic was re-created; its offsets say nothing of the old log's,
          so whatever they are this is data loss under the policy (skip: the new log's start, ``low``).
        * The same id, and the log ends below the position: the log was truncated (an unclean leader election);
          under skip it continues at the log's end, where new records will be written: what it kept below the
          position was read already.
        * An id on one side only (positions stored before ids were kept, a rewind, a cluster that cannot tell
          ids now): offsets alone decide, as :meth:`_checked_resume` says; a position without id adopts the
          current one, a known id is kept while the cluster cannot tell.
        """
        stored = last.topic_id
        if stored is not None and current is not None and stored != current:
            self._recreated(p, last.next_offset, stored, current)
            return low, current
        if stored is None and current is not None and p.topic not in self._adopted:
            self._adopted.add(p.topic)
            log.info("%s: the stored position carries no topic id (stored before ids were kept, or by a rewind); "
                     "adopting the topic's current id %s", p.id, current)
        if stored is not None and stored == current and last.next_offset > end:
            self._truncated(p, last.next_offset, low, end)
            return end, current
        return self._checked_resume(p, last.next_offset, low, end), current or stored

    def _recreated(self, p: Partition, next_offset: int, stored: str, current: str, *, frozen: bool = False) -> None:
        """A topic re-created under the stored position (counted once per new id)."""
        where = "inside a frozen, uncommitted txid" if frozen else "resuming"
        self._data_loss(
            p, TopicRecreatedError(p, next_offset, stored, current),
            f"{p.id} re-created (topic id {stored} -> {current}) under the stored next offset {next_offset}; read the "
            "new log from its start (data_loss: skip)",
            f"data loss on {p.id}: topic {p.topic} was re-created (its id was {stored}, now {current}); what the old "
            f"log held past the stored next offset {next_offset} was never read; {where} at the new log's start",
            once=(p, current))
    def _truncated(self, p: Partition, next_offset: int, low: int, end: int) -> None:
        """A log of the same topic id that now ends below ``next_offset`` (counted once per position)."""
        self._data_loss(
            p, LogRestartedError(p, next_offset, low, end),
            f"{p.id} truncated below the stored next offset {next_offset} to {end} (same topic id); continued at the "
            "log end (data_loss: skip)",
            f"data loss on {p.id}: the log ends at {end}, below the stored next offset {next_offset}, with the same "
            f"topic id (a truncated log: an unclean leader election); the records read at [{end}, {next_offset}) "
            f"are no longer in the log; continuing at the log end {end}, nothing read twice",
            once=(p, next_offset))
    def _publish_lag(self, p: Partition, lag: float) -> None:
        """Set the lag gauge; the partition's data-loss series appear (at 0) with its first lag."""
        metrics = self.metrics or SPOUT_METRICS
        if p not in self._seen:
            metrics.precreate(self.topology_id, p.topic, str(p.partition), self.config.data_loss.value)
            self._seen.add(p)
        metrics.partition_lag.labels(self.topology_id, p.topic, str(p.partition)).set(lag)

    def _skipped(self, p: Partition, e: PartitionUnavailableError) -> None:
        """An opaque batch leaves ``p`` out: its lag is unknown (NaN, not 0), and it is logged (rate-limited)."""
        self._publish_lag(p, float("nan"))
        now = time.monotonic()
        warned_at, since = self._skips.get(p, (float("-inf"), 0))
        if now - warned_at >= SKIP_LOG_INTERVAL_S:
            log.warning("%s skipped by this batch (%s)%s; the opaque spout goes on without it and reads it later",
                        p.id, e.reason, f", {since} more times since the last warning" if since else "")
            self._skips[p] = (now, 0)
        else:
            self._skips[p] = (warned_at, since + 1)

    def _watermarks(self, p: Partition) -> tuple[int, int]:
        """``(log start, LSO or high watermark)`` from the partition leader."""
        with POOL.lease(self._planning_config) as consumer:
            try:
                wm = consumer.get_watermark_offsets(TopicPartition(p.topic, p.partition),
                                                    timeout=self.config.request_timeout_s, cached=False)
            except KafkaException as e:
                raise PartitionUnavailableError(p, f"watermark query to {self.config.bootstrap_servers} failed: "
                                                   f"{e.args[0].str()}") from e
        if wm is None:
            raise PartitionUnavailableError(p, f"watermark query to {self.config.bootstrap_servers} timed out after "
                                               f"{self.config.request_timeout_s}s")
        return int(wm[0]), int(wm[1])

    def _bulk_watermarks(self, partitions: Sequence[Partition]) -> dict[Partition, tuple[int, int]]:
        """What :meth:`_watermarks` answers, for many partitions: per kind one ListOffsets per leader broker.

        The same requests from a consumer of the same config (so the same isolation level). A partition not
        answered (its own error, or the whole query failing) is left out: ``plan_partition`` then asks it alone.
        """
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        try:
            with POOL.lease(self._planning_config) as consumer:
                earliest = self._listed(consumer, wanted, OFFSET_BEGINNING)
                latest = self._listed(consumer, [p for p in wanted if p in earliest], OFFSET_END)
        except KafkaException:
            return {}
        # ordered as rd_kafka_query_watermark_offsets orders its two answers: the lower one is the log start
        return {p: (min(earliest[p], end), max(earliest[p], end)) for p, end in latest.items() if p in earliest}

    def _listed(self, consumer: Consumer, partitions: list[Partition], spec: int) -> dict[Partition, int]:
        """The offsets of ``spec`` (OFFSET_BEGINNING or OFFSET_END, ListOffsets' special timestamps) answered
        without error."""
        if not partitions:
            return {}
        answers = consumer.offsets_for_times([TopicPartition(p.topic, p.partition, spec) for p in partitions],
                                             timeout=self.config.request_timeout_s)
        return {Partition(tp.topic, tp.partition): int(tp.offset) for tp in answers
                if tp.error is None and tp.offset >= 0}

    def _first_offset(self, p: Partition, low: int, end: int) -> int:
        position = self.config.first_poll.position
        if position == "earliest":
            return low
        if position == "latest":
            return end
        if self.config.first_poll_timestamp_ms is None:  # refused when the config is made
            msg = f"first_poll {self.config.first_poll.name} needs first_poll_timestamp_ms"
            raise ValueError(msg)
        offset = self._offset_for_time(p, self.config.first_poll_timestamp_ms)
        return end if offset < 0 else min(max(offset, low), end)  # -1: no record at or after the time

    def _offset_for_time(self, p: Partition, timestamp_ms: int) -> int:
        """The first offset whose record timestamp is >= ``timestamp_ms``, or -1 if there is none."""
        with POOL.lease(self._planning_config) as consumer:
            try:
                [tp] = consumer.offsets_for_times([TopicPartition(p.topic, p.partition, timestamp_ms)],
                                                  timeout=self.config.request_timeout_s)
            except KafkaException as e:
                raise PartitionUnavailableError(p, f"offsets_for_times failed: {e.args[0].str()}") from e
        if tp.error is not None:
            raise PartitionUnavailableError(p, f"offsets_for_times failed: {tp.error.str()}")
        return int(tp.offset)

    def _checked_resume(self, p: Partition, next_offset: int, low: int, end: int) -> int:
        """``next_offset``, unless retention removed it, or the log restarted below it: then fail, or skip to
        ``low`` (the log's start), by policy.

        A log end below a stored position means the log restarted (a topic deleted and re-created, a log
        truncated): a stored position is never past the end it was planned against, and Kafka's list-offsets
        answers never go backwards across a leader change (KIP-207), so this is no transient state.
        """
        if next_offset > end:
            self._restarted(p, next_offset, low, end)
            return low
        if next_offset >= low:
            return next_offset
        self._lost(p, next_offset, low, low)
        return low

    def _restarted(self, p: Partition, next_offset: int, low: int, end: int, *, frozen: bool = False) -> None:
        """A log that now ends below the stored ``next_offset``, told apart by offsets alone."""
        where = "inside a frozen, uncommitted txid" if frozen else "resuming"
        self._data_loss(
            p, LogRestartedError(p, next_offset, low, end),
            f"{p.id} restarted below the stored next offset {next_offset} (log end {end}); read from the new log's "
            f"start {low} (data_loss: skip)",
            f"data loss on {p.id}: the stored next offset is {next_offset} but the log ends at {end} (topic "
            f"re-created or log truncated); what the old log held past {next_offset} was never read; {where} at "
            f"the new log's start {low}")
    def replan_frozen(self, meta: PartitionMetadata) -> PartitionMetadata:
        """``meta``, or what retention left of it (see :class:`spouts.protocols.PartitionedEmitter`)."""
        if meta.empty:
            return meta
        p = meta.partition_id
        try:
            low, end = self._watermarks(p)
        except PartitionUnavailableError:
            return meta  # the read waits for the partition
        current = self._current_id(p)
        if meta.topic_id is not None and current is not None:
            moved = self._replan_by_id(meta, meta.topic_id, current, low, end)
            if moved is not None:
                return moved
        if meta.next_offset > end:  # the log restarted below the frozen range: nothing of it is left
            self._restarted(p, meta.next_offset, low, end, frozen=True)
            return PartitionMetadata(meta.topic, meta.partition, low, low, 0, self.topology_id, current)
        if meta.first_offset >= low:
            return meta
        first = min(low, meta.next_offset)
        self._lost(p, meta.first_offset, first, low, frozen=True)
        return replace(meta, first_offset=first, record_count=meta.next_offset - first, topology_id=self.topology_id)

    def _replan_by_id(self, meta: PartitionMetadata, stored: str, current: str, low: int,
                      end: int) -> PartitionMetadata | None:
        """A frozen range in a log that ids tell apart: the topic re-created (an empty range at the new log's
        start) or its log truncated below the range (what is left of it); None when neither."""
        p = meta.partition_id
        if stored != current:
            self._recreated(p, meta.next_offset, stored, current, frozen=True)
            return PartitionMetadata(meta.topic, meta.partition, low, low, 0, self.topology_id, current)
        if meta.next_offset > end:
            self._truncated(p, meta.next_offset, low, end)
            first = max(low, min(meta.first_offset, end))
            return PartitionMetadata(meta.topic, meta.partition, first, end, end - first, self.topology_id, current)
        return None

    def _lost(self, p: Partition, start: int, resume: int, low: int, *, frozen: bool = False) -> None:
        """Offsets ``[start, resume)`` gone below the log start ``low`` (retention)."""
        where = "inside a frozen, uncommitted txid; replaying what is left" if frozen else f"continuing at {resume}"
        self._data_loss(
            p, DataLossError(p, start, low),
            f"{p.id} offsets [{start}, {low}) gone (retention); {resume - start} skipped (data_loss: skip)",
            f"data loss on {p.id}: offsets [{start}, {low}) are gone (retention); {resume - start} offsets "
            f"skipped, {where}",
            skipped=resume - start)

    def _data_loss(self, p: Partition, error: Exception, summary: str, warning: str, *,
                   once: Hashable | None = None, skipped: int = 0) -> None:
        """Count a data-loss event on ``p`` (once per ``once`` key when given), then raise ``error`` under policy
        fail, or keep ``summary`` for /readyz and log ``warning`` under policy skip."""
        policy = self.config.data_loss
        metrics = self.metrics or SPOUT_METRICS
        if once is None or once not in self._losses:
            if once is not None:
                self._losses.add(once)
            metrics.data_loss_events.labels(self.topology_id, p.topic, str(p.partition), policy.value).inc()
        if policy is DataLossPolicy.FAIL:
            raise error
        if skipped:
            metrics.data_loss_offsets.labels(self.topology_id, p.topic, str(p.partition)).inc(skipped)
        self.last_data_loss = f"{_now()}: {summary}"
        log.warning("%s", warning)
    def _count(self, p: Partition, start: int, stop: int) -> int:
        """Records actually delivered in ``[start, stop)`` (markers and aborted records excluded): reads it."""
        probe = PartitionMetadata(p.topic, p.partition, start, stop, 0, self.topology_id)
        with POOL.lease(self._consumer_config(probe)) as consumer:
            return sum(len(chunk) for chunk in read_range(consumer, probe, read_timeout_s=self.config.read_timeout_s))

    # -- reading ----------------------------------------------------------------------------

    def emit_partition(self, meta: PartitionMetadata) -> list[Record]:
        """Exactly the records of ``meta``'s range; raises PartitionUnavailableError if it can't be read now."""
        if meta.empty:
            return []
        with POOL.lease(self._consumer_config(meta)) as consumer, gc_paused():
            return [to_record(m) for chunk in read_range(consumer, meta, read_timeout_s=self.config.read_timeout_s)
                    for m in chunk]

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = DEFAULT_BATCH_SIZE,
                   columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The records of ``meta``'s range as Arrow record batches of ``columns`` (None: all; see
        :mod:`spouts.kafka.arrow`)."""
        return read_arrow(self.config, self.topology_id, meta, batch_size=batch_size, columns=columns)

    def close(self) -> None:
        self.topic_ids.close()  # pooled consumers outlive emitters; the admin client of the ids does not


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def to_record(m: Message) -> Record:
    """A delivered message as a :class:`Record` (timestamp 0 when the broker gave none)."""
    topic, partition, offset = m.topic(), m.partition(), m.offset()
    if topic is None or partition is None or offset is None:
        msg = f"not a delivered record (an event message?): {m.error()}"
        raise ValueError(msg)
    ts_type, ts = m.timestamp()
    return Record(topic, partition, offset, m.key(), m.value(), ts if ts_type else 0, _headers(m.headers()))


def _headers(headers: dict[str, str | bytes | None] | list[tuple[str, str | bytes | None]] | None,
             ) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as ``(name, bytes)`` pairs (librdkafka delivers a list of them; a str value is encoded)."""
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((k, v.encode() if isinstance(v, str) else v) for k, v in items)
