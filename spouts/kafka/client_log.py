"""librdkafka's log lines: one logger for every Kafka client the product makes, repeats held back per broker.

librdkafka logs every failed connection attempt of every client to every broker (``FAIL ... Connect to
ipv4#10.0.0.5:9092 failed: Connection refused``): in an outage one consumer writes several lines a
second, and a process holds many clients. Each client is given :data:`LIBRDKAFKA_LOG` as its ``logger``
(:func:`logged`; confluent-kafka delivers the lines when the client is polled). On that logger,
:class:`HoldsBackRepeats` shows the first line of each kind per broker (whichever client said it),
then at most one per :data:`REPEATS_EVERY_S`, saying how many it held back; another error, another
broker, or the same broker failing again after :data:`RECOVERED_AFTER_S` without a failure, shows at once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

#: At most one line of a kind per broker in this many seconds (per process).
REPEATS_EVERY_S = 60.0
#: A kind of line not seen for this long has ended (the broker came back): its next line shows at once. Three
#: times librdkafka's longest wait between two connection attempts (``reconnect.backoff.max.ms``, 10 s).
RECOVERED_AFTER_S = 30.0

_KEPT_KINDS = 1000  # kinds remembered at most; ended ones are forgotten first

#: ``[thrd:<thread>]: `` that starts librdkafka's lines, and the broker (``[proto://]host:port/<id>: ``) after it.
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
_BROKER = re.compile(r"^(?:[a-z_]+://)?(?P<broker>[^\s/]+:\d+)/[^\s:]+:\s*")
_ADDRESS = re.compile(r"\bipv[46]#\S+")  # the address a name resolved to: localhost is 127.0.0.1 and ::1 in turn
_TIMINGS = " (after "  # "(after 303ms in state CONNECT, 4 identical error(s) suppressed)" ends many lines


@dataclass(frozen=True, slots=True)
class LineKind:
    """What makes two librdkafka lines repeats of each other: the facility, the broker, the words."""

    facility: str
    broker: str  # host:port, or "" for a line about no broker
    what: str


def kind_of(record: logging.LogRecord) -> LineKind:
    """The kind of a line confluent-kafka (or the native reader) logged as ``"%s [%s] %s"``, facility, client
    name and text: the client name is left out, so every client's line about a broker is one kind."""
    args = record.args
    if record.msg == "%s [%s] %s" and isinstance(args, tuple) and len(args) == 3:
        facility, text = str(args[0]), str(args[2])
    else:
        facility, text = "", record.getMessage()
    text = _THREAD.sub("", text.split(_TIMINGS, 1)[0])
    broker = _BROKER.match(text)
    if broker is not None:
        text = text[broker.end():]
    return LineKind(facility, broker.group("broker") if broker else "", _ADDRESS.sub("ipv#<address>", text))


@dataclass(slots=True)
class _Seen:
    shown_at: float
    last_at: float
    held: int = 0


class RepeatLimit:
    """The decision, by kind: show a line (and say how many were held back since the last one shown) or hold it.

    Pure but for its clock; thread-safe (librdkafka's lines come from whichever thread polls a client).
    """

    def __init__(self, every_s: float = REPEATS_EVERY_S, recovered_after_s: float = RECOVERED_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.recovered_after_s, self.clock = every_s, recovered_after_s, clock
        self._seen: dict[LineKind, _Seen] = {}
        self._lock = threading.Lock()

    def seen(self, kind: LineKind) -> tuple[int, float] | None:
        """None: hold this line back. Else show it, with how many of its kind were held back and over how
        many seconds (since the last one shown)."""
        now = self.clock()
        with self._lock:
            seen = self._seen.get(kind)
            if seen is None:
                self._forget_ended(now)
                self._seen[kind] = _Seen(now, now)
                return 0, 0.0
            ended = now - seen.last_at >= self.recovered_after_s
            seen.last_at = now
            if not ended and now - seen.shown_at < self.every_s:
                seen.held += 1
                return None
            shown = (seen.held, now - seen.shown_at)
            seen.shown_at, seen.held = now, 0
            return shown

    def _forget_ended(self, now: float) -> None:
        if len(self._seen) >= _KEPT_KINDS:
            self._seen = {k: s for k, s in self._seen.items() if now - s.last_at < self.recovered_after_s}
            if len(self._seen) >= _KEPT_KINDS:
                self._seen.clear()


class HoldsBackRepeats(logging.Filter):
    """A :class:`RepeatLimit` on a logger: a line shown after repeats says ``(N more like this in the last S s)``."""

    def __init__(self, limit: RepeatLimit | None = None) -> None:
        super().__init__()
        self.limit = limit or RepeatLimit()

    def filter(self, record: logging.LogRecord) -> bool:
        shown = self.limit.seen(kind_of(record))
        if shown is None:
            return False
        held, over_s = shown
        if held:
            record.msg, record.args = f"{record.getMessage()} ({held} more like this in the last {over_s:.0f} s)", ()
        return True


#: The logger every Kafka client of the product gives librdkafka (property ``logger``).
LIBRDKAFKA_LOG = logging.getLogger("spouts.kafka.librdkafka")
LIBRDKAFKA_LOG.addFilter(HoldsBackRepeats())


def logged(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` with :data:`LIBRDKAFKA_LOG` as the client's logger: the one place a client's log is set."""
    return {**conf, "logger": LIBRDKAFKA_LOG}
