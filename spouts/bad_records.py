"""Bad records: a record the pipeline cannot use, named by its source coordinates and the reason.

A spout that decodes records (``key_format``/``value_format``) reports each record it cannot
decode to an ``on_bad`` callback instead of yielding it, so the rest of the range goes on; the
pipeline's error policy (fail, skip, dead letter) decides what happens to it. The decision is a
function of the record alone, so every replay of a txid meets the same bad records.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from spouts.errors import SpoutError


class Stage(enum.StrEnum):
    """Where a record turned out bad."""

    DECODE = "decode"  # its key or value does not parse in the declared format
    TRANSFORM = "transform"  # a transform's expression fails on it (an ANSI cast, a division by zero)
    AGGREGATE = "aggregate"  # it cannot be aggregated or stored (a null key, a value the column cannot hold)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """One bad record: where it is in the source, at which stage it failed, and why."""

    topic: str
    partition: int
    offset: int
    stage: Stage
    reason: str  # a short, stable class of the error (e.g. "json_invalid", "CAST_INVALID_INPUT")
    message: str  # the error's text, for people

    @property
    def coordinates(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


#: Called once per bad record found while reading a range.
OnBad = Callable[[BadRecord], None]


class BadRecordError(SpoutError):
    """A bad record met where no error policy lets the pipeline go on (policy ``fail``)."""

    def __init__(self, record: BadRecord) -> None:
        self.record = record
        super().__init__(f"bad record at {record.coordinates} ({record.stage}): {record.reason}: {record.message}")
