"""Read exactly one planned range ``[first_offset, next_offset)`` of a partition.

The trap: offsets are not records. Transaction markers and (in ``read_committed``) aborted records
occupy offsets that are never delivered, so a range may yield fewer records than it spans and may
end on offsets that deliver nothing. Reading therefore stops on *position* (a delivered offset at or
past ``next_offset``, or an end-of-partition event at or past it), never after a count of records.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator
from typing import TypeVar

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from spouts.errors import DataLossError, PartitionUnavailableError
from spouts.kafka.access import REFUSALS
from spouts.metadata import PartitionMetadata

T = TypeVar("T")

#: How long one ``consume`` call may wait; progress is checked between calls.
POLL_S = 0.05

_OUT_OF_RANGE = {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}  # librdkafka's local error codes are public, named with a leading underscore


def read_range(consumer: Consumer, meta: PartitionMetadata, *, read_timeout_s: float,
               chunk: int = 10_000) -> Generator[list[Message]]:
    """Yield the records of ``meta``'s range in order, in lists of at most ``chunk``.

    Raises :class:`PartitionUnavailableError` when the range makes no progress for
    ``read_timeout_s`` (no leader, broker down) and :class:`DataLossError` when its start is gone.
    """
    if meta.empty:
        return

    def step(pos: int) -> tuple[list[Message], int]:
        end = meta.next_offset
        msgs = consumer.consume(num_messages=max(1, min(chunk, end - pos)), timeout=POLL_S)
        if msgs and (msgs[0].partition() != meta.partition or msgs[0].topic() != meta.topic):
            # librdkafka drops messages of an earlier assignment (fetch versions); never trust it blindly
            msgs = [m for m in msgs if m.partition() == meta.partition and m.topic() == meta.topic]
        last = _last_offset_within(msgs, pos, end)
        if last is not None:  # the common chunk: one check per record, no loop
            return msgs, last + 1
        return _sift(consumer, meta, msgs, pos)

    consumer.assign([TopicPartition(meta.topic, meta.partition, meta.first_offset)])
    try:
        yield from follow_range(meta, step, read_timeout_s)
    finally:
        with contextlib.suppress(KafkaException):
            consumer.unassign()  # stop prefetching past the range


def follow_range(meta: PartitionMetadata, step: Callable[[int], tuple[T | None, int]],
                 read_timeout_s: float) -> Generator[T]:
    """Yield what ``step(position)`` read (nothing for an empty or None read) until the position it returns
    reaches the range's end: a range ends on position, never on a count of records. No progress for
    ``read_timeout_s`` raises :class:`PartitionUnavailableError`. Both readers (confluent-kafka's messages and the
    native reader's chunks) read a range by this loop."""
    pos, end = meta.first_offset, meta.next_offset
    deadline = time.monotonic() + read_timeout_s
    while pos < end:
        out, after = step(pos)
        if out:
            yield out
        if after > pos:
            pos, deadline = after, time.monotonic() + read_timeout_s
        elif time.monotonic() > deadline:
            raise PartitionUnavailableError(
                meta.partition_id, f"no progress at offset {pos} for {read_timeout_s}s (range ends at {end})")


def _sift(consumer: Consumer, meta: PartitionMetadata, msgs: list[Message], pos: int) -> tuple[list[Message], int]:
    """The records of ``msgs`` from ``pos`` on within the range, and the position after them (an end-of-partition
    event moves it too); raises for an error that waiting never mends."""
    end = meta.next_offset
    out: list[Message] = []
    for m in msgs:
        err, offset = m.error(), m.offset()
        if offset is None:
            continue  # librdkafka sets an offset on every record and end-of-partition event
        if err is None:
            if offset >= end:
                return out, end
            if offset >= pos:
                out.append(m)
                pos = offset + 1
        elif err.code() == KafkaError._PARTITION_EOF:  # librdkafka's local error codes are public, named with a leading underscore
            pos = max(pos, offset)  # everything before the end was delivered or was a gap
        else:
            raise_unmended(err, meta, pos, lambda: consumer.get_watermark_offsets(
                TopicPartition(meta.topic, meta.partition), timeout=5.0, cached=False))
    return out, pos


def raise_unmended(err: KafkaError, meta: PartitionMetadata, pos: int,
                   watermarks: Callable[[], tuple[int, int] | None]) -> None:
    """Raise for a range that is gone, a refusal or a fatal error; anything else is transient (broker down,
    leader moving) and retried by librdkafka. ``watermarks`` asks the broker for the partition's (low, high)."""
    if err.code() in _OUT_OF_RANGE:
        raise _range_error(meta, pos, err, watermarks)
    if err.code() in REFUSALS:  # e.g. no Read ACL on the topic: never mended by waiting
        raise KafkaException(KafkaError(err.code(), f"topic {meta.topic}: {err.str()}"))
    if err.fatal():
        raise KafkaException(err)


def _last_offset_within(msgs: list[Message], pos: int, end: int) -> int | None:
    """The last offset of ``msgs`` when every message is a record (no event, no error) at an offset in
    ``[pos, end)``; otherwise None. Offsets of one partition's messages increase: the first and the
    last bound them all."""
    if not msgs:
        return None
    first, last = msgs[0].offset(), msgs[-1].offset()
    if first is None or last is None or first < pos or last >= end:
        return None
    return last if all(m.error() is None for m in msgs) else None


def _range_error(meta: PartitionMetadata, pos: int, err: KafkaError,
                 watermarks: Callable[[], tuple[int, int] | None]) -> Exception:
    """Why a fetch was out of range: offsets gone below the log start, or the log end moved back."""
    try:
        wm = watermarks()
    except KafkaException:
        wm = None
    if wm is not None and pos < wm[0]:
        return DataLossError(meta.partition_id, pos, wm[0])
    return PartitionUnavailableError(meta.partition_id, f"offset {pos} out of range: {err.str()}")
