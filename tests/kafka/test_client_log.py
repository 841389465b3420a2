"""librdkafka's log: repeats of a line held back per broker, across clients, and the count said later."""

from __future__ import annotations

import ast
import logging
import re
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from spouts.kafka import access
from spouts.kafka.client_log import LIBRDKAFKA_LOG, HoldsBackRepeats, LineKind, RepeatLimit, kind_of

REFUSED = ("[thrd:{b}/bootstrap]: {b}/bootstrap: Connect to ipv{v}#{a} failed: Connection refused "
           "(after {ms}ms in state CONNECT)")


def line(broker: str = "10.0.0.5:9092", client: str = "rdkafka#consumer-1", *, ms: int = 0, v: int = 4,
         address: str | None = None, facility: str = "FAIL", text: str | None = None) -> logging.LogRecord:
    """A record as confluent-kafka's log callback makes it: ``"%s [%s] %s"`` with facility, client, text."""
    told = text or REFUSED.format(b=broker, v=v, a=address or broker, ms=ms)
    return logging.LogRecord(LIBRDKAFKA_LOG.name, logging.ERROR, __file__, 1, "%s [%s] %s", (facility, client, told),
                             None)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def repeats(clock: Clock) -> HoldsBackRepeats:
    return HoldsBackRepeats(RepeatLimit(every_s=60.0, recovered_after_s=30.0, clock=clock))


def test_a_lines_kind_leaves_out_the_client_the_timings_and_the_resolved_address() -> None:
    """Two clients' lines about one broker are one kind, whichever address the name resolved to."""
    a = kind_of(line(client="rdkafka#consumer-1", ms=3, v=4, address="127.0.0.1:9092", broker="localhost:9092"))
    b = kind_of(line(client="rdkafka#producer-7", ms=0, v=6, address="[::1]:9092", broker="localhost:9092"))
    assert a == b == LineKind("FAIL", "localhost:9092", "Connect to ipv#<address> failed: Connection refused")
    secured = kind_of(line(text="[thrd:sasl_ssl://b:9093/2]: sasl_ssl://b:9093/2: SASL authentication error: "
                                "bad password (after 303ms in state AUTH_REQ, 4 identical error(s) suppressed)"))
    assert secured == LineKind("FAIL", "b:9093", "SASL authentication error: bad password")


def test_repeats_of_one_broker_from_several_clients_show_once_per_interval(
        clock: Clock, repeats: HoldsBackRepeats) -> None:
    """The first line shows; 10 s of repeats from three clients are held; the first after 60 s says how many."""
    shown = []
    for i in range(30):
        clock.now = i / 3
        shown.append(repeats.filter(line(client=f"rdkafka#consumer-{i % 3}", ms=i)))
    assert shown == [True] + [False] * 29
    # librdkafka keeps failing meanwhile (a line every 5 s here): still one outage
    for t in range(15, 60, 5):
        clock.now = float(t)
        assert not repeats.filter(line())
    clock.now = 61.0
    late = line()
    assert repeats.filter(late)
    assert late.getMessage().endswith("failed: Connection refused (after 0ms in state CONNECT) "
                                      "(38 more like this in the last 61 s)")
    clock.now = 62.0
    assert not repeats.filter(line())  # a new interval starts at the line shown


def test_another_broker_or_another_error_shows_at_once(clock: Clock, repeats: HoldsBackRepeats) -> None:
    """Holding back one broker's repeats never hides another broker's first line, nor another error."""
    assert repeats.filter(line("10.0.0.5:9092"))
    assert repeats.filter(line("10.0.0.6:9092"))
    assert not repeats.filter(line("10.0.0.6:9092"))
    assert repeats.filter(line("10.0.0.5:9092", text="[thrd:10.0.0.5:9092/1]: 10.0.0.5:9092/1: Disconnected "
                                                     "(after 12ms in state UP)"))
    assert repeats.filter(line("10.0.0.5:9092", facility="ERROR"))
    assert repeats.filter(logging.LogRecord("x", logging.WARNING, __file__, 1, "[%s] %d librdkafka log lines not shown",
                                            ("c", 3), None))  # not librdkafka's format: its own text is its kind


def test_a_broker_that_recovers_and_fails_again_shows_again(clock: Clock, repeats: HoldsBackRepeats) -> None:
    """No failure for 30 s ends the outage: the next failure shows at once, with the count the last one held."""
    assert repeats.filter(line())
    clock.now = 5.0
    assert not repeats.filter(line())
    clock.now = 34.9  # 29.9 s quiet: still the same outage
    assert not repeats.filter(line())
    clock.now = 65.0  # 30.1 s quiet, within 60 s of the line shown
    again = line()
    assert repeats.filter(again)
    assert again.getMessage().endswith("(2 more like this in the last 65 s)")
    clock.now = 66.0
    assert not repeats.filter(line())


def test_kinds_kept_are_bounded(clock: Clock) -> None:
    """A process that saw many brokers keeps at most 1000 kinds, forgetting ended ones first."""
    limit = RepeatLimit(every_s=60.0, recovered_after_s=30.0, clock=clock)
    for i in range(1000):
        limit.seen(LineKind("FAIL", f"h{i}:9092", "x"))
    clock.now = 31.0
    limit.seen(LineKind("FAIL", "now:9092", "x"))
    assert limit.seen(LineKind("FAIL", "now:9092", "x")) is None  # kept
    assert limit.seen(LineKind("FAIL", "h1:9092", "x")) == (0, 0.0)  # ended, forgotten, a first line again


# -- real clients against brokers that refuse connections ---------------------------------------------------------


@pytest.fixture
def refusing_brokers() -> list[str]:
    """Two loopback addresses with nothing listening: every connection is refused, as in an outage."""
    found = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            found.append(f"127.0.0.1:{s.getsockname()[1]}")
    return found


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def shown() -> Iterator[Lines]:
    lines = Lines()
    LIBRDKAFKA_LOG.addHandler(lines)
    try:
        yield lines
    finally:
        LIBRDKAFKA_LOG.removeHandler(lines)


def refused_per_broker(records: list[logging.LogRecord], brokers: list[str]) -> Counter[str]:
    found: Counter[str] = Counter()
    for r in records:
        for b in brokers:
            if re.search(rf"Connect to ipv4#{re.escape(b)} failed: Connection refused", r.getMessage()):
                found[b] += 1
    return found


def test_an_outage_logs_one_line_per_broker_from_all_the_clients(refusing_brokers: list[str], shown: Lines) -> None:
    """Four clients (two consumers, a producer, an admin client) configured as the product configures them,
    polled for 5 s against two refusing brokers (librdkafka says ~20 lines a second per consumer): one line
    per broker."""
    servers = ",".join(refusing_brokers)
    consumers = [Consumer(access.watched({"bootstrap.servers": servers, "group.id": f"g{i}"})[0]) for i in range(2)]
    clients: list[Consumer | Producer | AdminClient] = [*consumers, Producer(access.watched({"bootstrap.servers": servers})[0]),
                                                        AdminClient(access.watched({"bootstrap.servers": servers})[0])]
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        for c in clients:
            c.poll(0.05)
    for consumer in consumers:
        consumer.close()
    assert refused_per_broker(shown.records, refusing_brokers) == dict.fromkeys(refusing_brokers, 1)


def test_real_repeats_are_counted_in_the_next_line(refusing_brokers: list[str]) -> None:
    """On a 1 s interval, a consumer's real librdkafka lines come out about once a second per broker, each
    after the first saying how many it stands for."""
    log = logging.getLogger("tests.kafka.client_log.short")
    log.addFilter(HoldsBackRepeats(RepeatLimit(every_s=1.0)))
    lines = Lines()
    log.addHandler(lines)
    log.propagate = False
    consumer = Consumer({"bootstrap.servers": ",".join(refusing_brokers), "group.id": "g", "logger": log})
    deadline = time.monotonic() + 4.5
    while time.monotonic() < deadline:
        consumer.poll(0.05)
    consumer.close()
    per_broker = refused_per_broker(lines.records, refusing_brokers)
    assert all(3 <= per_broker[b] <= 6 for b in refusing_brokers), per_broker
    counted = [r.getMessage() for r in lines.records if "more like this in the last 1 s" in r.getMessage()]
    assert len(counted) >= 4, [r.getMessage() for r in lines.records]


# -- every client the product makes --------------------------------------------------------------------------------

CLIENTS = {"Consumer", "Producer", "AdminClient"}
ROUTED = {"watched", "logged"}  # spouts.kafka.access.watched, spouts.kafka.client_log.logged
#: Clients that need no log: the mock cluster's metadata look-up (a test peer's), never polled.
UNLOGGED = {("spouts/kafka/mock_cluster.py", "leaders")}


def _called(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _routed(arg: ast.expr, scope: ast.AST) -> bool:
    """``arg`` is ``watched(...)``/``logged(...)``, a dict naming its own ``logger``, or a name assigned from either."""
    if _called(arg) in ROUTED:
        return True
    if isinstance(arg, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "logger" for k in arg.keys):
        return True
    if isinstance(arg, ast.Subscript):  # watched(...)[0]
        return _routed(arg.value, scope)
    if isinstance(arg, ast.Name):
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign) and _called(node.value) in ROUTED:
                names = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
                if arg.id in names:
                    return True
    return False


def test_every_client_the_product_makes_logs_through_the_product_logger() -> None:
    """Every ``Consumer(...)``, ``Producer(...)`` and ``AdminClient(...)`` in ``app`` and ``spouts`` is given its
    config through ``watched``/``logged`` (so repeats are held back per broker), or names its own logger."""
    root = Path(__file__).resolve().parents[2]
    unrouted = []
    for path in sorted([*root.joinpath("app").rglob("*.py"), *root.joinpath("spouts").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        for scope in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for call in (n for n in ast.walk(scope) if _called(n) in CLIENTS):
                assert isinstance(call, ast.Call)
                where = (str(path.relative_to(root)), scope.name)
                if where not in UNLOGGED and not (call.args and _routed(call.args[0], scope)):
                    unrouted.append(f"{where[0]}:{call.lineno} in {where[1]}")
    assert unrouted == []
