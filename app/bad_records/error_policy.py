"""A pipeline's error policy: what happens to a bad record (fail, skip, or a dead-letter topic).

    Topology("sales", errors=ErrorPolicy.dead_letter("sales-dead-letters"))

``fail`` (the default) stops the pipeline (exit code 1) with a message naming the record's topic,
partition and offset and the error: a record the pipeline cannot use is a surprise worth a person's
look, and nothing is lost while the pipeline waits. ``skip`` drops it, counted by stage and reason,
in one line per txid (how many, of which kinds, the first one's coordinates and error; each record's
own line at DEBUG); ``dead_letter`` writes it to a Kafka topic with its source coordinates and the
error as headers (:mod:`app.bad_records.dead_letters`). Either way the rest of its txid commits.

:class:`BadRecordHandler` applies the policy to a txid's bad records once its plan is frozen and
before any of its state is written (the coordinator calls :meth:`BadRecordHandler.settle`).
"""

from __future__ import annotations

import enum
import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spouts.bad_records import BadRecord, BadRecordError

if TYPE_CHECKING:
    from app.bad_records.dead_letters import DeadLetterStarts, DeadLetterWriter
    from app.metrics import Metrics

log = logging.getLogger(__name__)

KINDS_SHOWN = 3  # stage/reason pairs named in a txid's skip line (all are counted)
MESSAGE_CHARS = 160  # of an error's text in a log line (the full text is in the dead letter's headers)
_REPEATED = re.compile(r"^\w+(Exception|Error): ")  # Spark's text starts with the Java exception's class


class Action(enum.StrEnum):
    FAIL = "fail"
    SKIP = "skip"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class ErrorPolicy:
    """What a pipeline does with a bad record; ``topic`` is the dead-letter topic (``dead_letter`` only)."""

    action: Action = Action.FAIL
    topic: str | None = None

    def __post_init__(self) -> None:
        if (self.action is Action.DEAD_LETTER) != (self.topic is not None):
            msg = "a dead-letter policy needs a topic, and only it has one"
            raise ValueError(msg)

    @classmethod
    def fail(cls) -> ErrorPolicy:
        return cls(Action.FAIL)

    @classmethod
    def skip(cls) -> ErrorPolicy:
        return cls(Action.SKIP)

    @classmethod
    def dead_letter(cls, topic: str) -> ErrorPolicy:
        return cls(Action.DEAD_LETTER, topic)

    def describe(self) -> str | dict[str, dict[str, str]]:
        """As written in the config: ``fail``, ``skip`` or ``{dead_letter: {topic: ...}}``."""
        return {"dead_letter": {"topic": self.topic}} if self.topic is not None else self.action.value


def in_order(records: Sequence[BadRecord]) -> list[BadRecord]:
    """One entry per source record, by source coordinates (the order every replay sees)."""
    seen = {(r.topic, r.partition, r.offset): r for r in sorted(records, key=_order, reverse=True)}
    return sorted(seen.values(), key=_order)


def _order(r: BadRecord) -> tuple[str, int, int, str]:
    return r.topic, r.partition, r.offset, r.stage.value


def kinds(records: Sequence[BadRecord]) -> str:
    """``decode json_invalid 5, transform CAST_INVALID_INPUT 1``: the most frequent stage/reason pairs, counted."""
    counts = Counter(f"{r.stage} {r.reason}" for r in records)
    shown = ", ".join(f"{kind} {n}" for kind, n in counts.most_common(KINDS_SHOWN))
    return shown + (f", {len(counts) - KINDS_SHOWN} more kinds" if len(counts) > KINDS_SHOWN else "")


def brief(message: str, reason: str = "") -> str:
    """An error's text in one short line: its first sentence, at most :data:`MESSAGE_CHARS` characters, without
    the exception class and ``[reason]`` in front that the line says already (for people; nothing decides on it)."""
    line = " ".join(message.split())
    if reason:
        line = _REPEATED.sub("", line, count=1).removeprefix(f"[{reason}] ")
    end = line.find(". ")
    if 0 < end < MESSAGE_CHARS:
        return line[:end + 1]
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."


def handler_for(pipeline: str, policy: ErrorPolicy, spout: object, metrics: Metrics) -> BadRecordHandler:
    """The handler of ``policy``; a dead-letter policy writes to the cluster the (Kafka) ``spout`` reads."""
    writer = None
    if policy.topic is not None:
        from app.bad_records.dead_letters import DeadLetterWriter

        writer = DeadLetterWriter.for_spout(pipeline, policy.topic, spout)
    return BadRecordHandler(pipeline, policy, metrics, writer)


class BadRecordHandler:
    """Applies one pipeline's :class:`ErrorPolicy` to the bad records of each txid, counts and logs them."""

    def __init__(self, pipeline: str, policy: ErrorPolicy, metrics: Metrics,
                 dead_letters: DeadLetterWriter | None = None) -> None:
        if policy.action is Action.DEAD_LETTER and dead_letters is None:
            msg = f"pipeline {pipeline!r}: a dead-letter policy needs a dead-letter writer"
            raise ValueError(msg)
        self.pipeline, self.policy, self.metrics, self.dead_letters = pipeline, policy, metrics, dead_letters
        self._counted_txid = 0  # a replay in this process does not count its records again

    def settle(self, txid: int, records: Sequence[BadRecord], progress: DeadLetterStarts) -> None:
        """Apply the policy to ``txid``'s bad records: raise (fail), count (skip), or write them (dead letter)."""
        if not records:
            return
        bad = in_order(records)
        action = self.policy.action
        if action is Action.FAIL:
            self._count(txid, bad[:1])
            raise BadRecordError(bad[0])
        if action is Action.DEAD_LETTER:
            if self.dead_letters is None:  # refused by __init__
                msg = f"pipeline {self.pipeline!r}: a dead-letter policy needs a dead-letter writer"
                raise ValueError(msg)
            written = self.dead_letters.write(txid, bad, progress)
            log.info("pipeline %s txid %d: %d bad records in dead-letter topic %s (%d written now, the rest by an "
                     "earlier attempt)", self.pipeline, txid, len(bad), self.policy.topic, written)
        else:
            for r in bad if log.isEnabledFor(logging.DEBUG) else ():
                log.debug("pipeline %s txid %d: skipping bad record %s (%s): %s: %s", self.pipeline, txid,
                          r.coordinates, r.stage, r.reason, r.message)
            first = bad[0]
            kind = "" if len({(r.stage, r.reason) for r in bad}) == 1 else f" ({first.stage}): {first.reason}"
            log.warning("pipeline %s txid %d: skipped %d bad records (%s); first %s%s: %s", self.pipeline, txid,
                        len(bad), kinds(bad), first.coordinates, kind, brief(first.message, first.reason))
        self._count(txid, bad)

    def close(self) -> None:
        if self.dead_letters is not None:
            self.dead_letters.close()

    def _count(self, txid: int, bad: Sequence[BadRecord]) -> None:
        if txid <= self._counted_txid:
            return
        self._counted_txid = txid
        for r in bad:
            self.metrics.bad_records.labels(self.pipeline, r.stage.value, r.reason, self.policy.action.value).inc()
