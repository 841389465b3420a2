"""A value stamped with the coordinates of the record it came from: what ``latest``/``first`` keep.

A record's place in a topic is ``(timestamp, partition, offset)`` (Kafka's timestamp in
milliseconds, -1 when the broker reports none). Two stamped values compare by that place, and on a
tie (one record that a transform exploded into several rows) by the value itself, None lowest, so
the choice is the same in Spark, in Python and on every replay.

Stored, a stamped value is two columns: the typed value ``<name>`` and ``<name>_at``, the record's
place as text ``"<timestamp>:<partition>:<offset>"`` (see :data:`AT_SUFFIX`): the value stays a
plain typed column for CQL readers, and a later batch can tell whether it is older or newer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

AT_SUFFIX = "_at"  # the column holding a stamped value's record place
NO_TIMESTAMP = -1  # Kafka's "no timestamp"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Stamped(NamedTuple):
    """``value`` from the record at ``(timestamp, partition, offset)``.

    A tuple in that field order, so Arrow builds a struct from it and Spark's struct ordering
    (field by field, nulls first) matches :meth:`place`.
    """

    timestamp: int
    partition: int
    offset: int
    value: Any

    def place(self) -> tuple[int, int, int, bool, Any]:
        """The total order ``latest``/``first`` pick by (ties on the record broken by the value, None lowest)."""
        return (self.timestamp, self.partition, self.offset, self.value is not None,
                0 if self.value is None else self.value)

    @property
    def at(self) -> str:
        """The record place as stored in ``<name>_at``."""
        return f"{self.timestamp}:{self.partition}:{self.offset}"

    @staticmethod
    def parse_at(value: Any, at: str) -> Stamped:
        """The stamped value of a stored ``(value, at)`` column pair."""
        ts, partition, offset = (int(p) for p in at.split(":"))
        return Stamped(ts, partition, offset, value)

    @staticmethod
    def of(raw: Any) -> Stamped:
        """A Stamped from itself, a 4-tuple or a mapping (how an Arrow/Spark struct row arrives)."""
        if isinstance(raw, Stamped):
            return raw
        if isinstance(raw, Mapping):
            return Stamped(_millis(raw["timestamp"]), int(raw["partition"]), int(raw["offset"]), raw["value"])
        ts, partition, offset, value = raw
        return Stamped(_millis(ts), int(partition), int(offset), value)

    @staticmethod
    def of_record(record: Any, value: Any) -> Stamped:
        """``value`` stamped with a :class:`~spouts.protocols.Record`'s place (the LocalExecutor's way in)."""
        return Stamped(_millis(record.timestamp), record.partition, record.offset, value)


def _millis(ts: Any) -> int:
    """Milliseconds since the epoch of an int, a datetime (Arrow's timestamp) or None (no timestamp)."""
    if ts is None:
        return NO_TIMESTAMP
    if isinstance(ts, datetime):
        aware = ts if ts.tzinfo else ts.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    return int(ts)


def unstamped(value: Any) -> Any:
    """What readers see of a stored aggregate: stamped parts replaced by their values."""
    if isinstance(value, Stamped):
        return value.value
    if isinstance(value, tuple):
        return tuple(v.value if isinstance(v, Stamped) else v for v in value)
    return value
