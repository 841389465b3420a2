"""The native range reader against confluent-kafka's: the same batches for any range, batch size and chunk size,
and the same failures (an unreachable range, a down broker, records deleted before they were read), on any Kafka peer.

The Python reader is the reference: both read one topic that holds every kind of record (null and empty keys
and values, headers, explicit timestamps, committed and aborted transactions and their markers).

Where the library is not built (no C compiler or librdkafka's headers: ``make`` says so and goes on), every test
here is skipped with the reason; in CI (``CI`` set) the Makefile fails when the build fails, so a library missing
there fails these tests instead of skipping them.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spouts.errors import DataLossError, PartitionUnavailableError
from spouts.kafka import native as native_module
from spouts.kafka import read_arrow
from spouts.kafka.access import LIBRDKAFKA_LOG
from spouts.kafka.arrow import SCHEMA, native
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.native import NATIVE_POOL, NativeReader, NativeReaderUnavailableError
from spouts.kafka.native.batches import read_native
from spouts.metadata import PartitionMetadata
from tests.kafka.fixtures import KafkaPeer, MockKafkaCluster, unique_topic
from tests.kafka.helpers import config, produce, spread
from tests.kafka.native_fixtures import native_built  # noqa: F401  (fixture)

COLUMNS = [f.name for f in SCHEMA if f.name != "headers"]


pytestmark = pytest.mark.usefixtures("native_built")
T0 = 1_700_000_000_000


def _fill(bootstrap: str, topic: str) -> int:
    """Every kind of record on partition 0; returns the log end."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(40):
        key = None if i % 5 == 0 else (b"" if i % 7 == 0 else f"k{i}".encode())
        value = None if i % 6 == 0 else (b"" if i % 11 == 0 else f"value {i} ".encode() * (1 + i % 4))
        headers: list[tuple[str, str | bytes | None]] | None = [("h", f"{i}".encode())] if i % 3 == 0 else None
        p.produce(topic, value, key=key, partition=0, timestamp=T0 + i, headers=headers)
    assert p.flush(30) == 0
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique_topic("tx")})
    tx.init_transactions(30)
    for n, commit in ((3, True), (2, False), (4, True)):
        tx.begin_transaction()
        for j in range(n):
            tx.produce(topic, f"tx {n} {j} {commit}".encode(), key=b"t", partition=0)
        tx.flush(30)
        (tx.commit_transaction if commit else tx.abort_transaction)(30)
    for i in range(10):
        p.produce(topic, f"after {i}".encode(), partition=0)
    assert p.flush(30) == 0
    return 40 + 3 + 1 + 2 + 1 + 4 + 1 + 10


def _read(cfg: KafkaSpoutConfig, meta: PartitionMetadata, batch_size: int, columns: list[str]) -> list[pa.RecordBatch]:
    return list(read_arrow(cfg, "topo", meta, batch_size=batch_size, columns=columns))


@pytest.fixture(scope="module")
def mixed_topic(kafka_peer: KafkaPeer) -> tuple[KafkaPeer, str, int]:
    topic = unique_topic("mixed")
    kafka_peer.create_topic(topic, 1)
    return kafka_peer, topic, _fill(kafka_peer.bootstrap_servers(), topic)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_both_readers_read_the_same_batches(mixed_topic: tuple[KafkaPeer, str, int], data: st.DataObject) -> None:
    """Any range, batch size, chunk size (in bytes, down to one record a chunk) and columns: the native reader's
    batches hold exactly the Python reader's rows, at most ``batch_size`` each."""
    peer, topic, end = mixed_topic
    first = data.draw(st.integers(0, end), label="first")
    last = data.draw(st.integers(first, end), label="next")
    batch_size = data.draw(st.integers(1, 80), label="batch_size")
    max_bytes = data.draw(st.sampled_from([1, 20, 200, native_module.CHUNK_BYTES]), label="max_bytes")
    columns = data.draw(st.lists(st.sampled_from(COLUMNS), min_size=1, unique=True), label="columns")
    base = config(peer.bootstrap_servers(), topics=[topic], read_timeout_s=5.0)
    meta = PartitionMetadata(topic, 0, first, last, last - first, "topo")
    expected = pa.Table.from_batches(_read(replace(base, reader="python"), meta, batch_size, columns),
                                     schema=pa.schema([f for f in SCHEMA if f.name in columns]))
    with NATIVE_POOL.lease(base.consumer_config("topo")) as reader:
        got = list(read_native(reader, meta, expected.schema, batch_size=batch_size, read_timeout_s=5.0,
                               max_bytes=max_bytes))
    assert all(0 < b.num_rows <= batch_size for b in got)
    assert pa.Table.from_batches(got, schema=expected.schema).equals(expected)


def test_the_native_reader_reads_what_the_producer_acknowledged(kafka_peer: KafkaPeer) -> None:
    """Checked against the producer, not the other reader: offsets, keys, values and timestamps of a range."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 2)
    acked = produce(kafka_peer.bootstrap_servers(), topic, spread(60, 2), key=b"k",
                    timestamps=[T0 + i for i in range(60)])
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], reader="native")
    batches = _read(cfg, PartitionMetadata(topic, 1, 4, 25, 21, "topo"), 8, COLUMNS)
    rows = pa.Table.from_batches(batches).to_pylist()
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], r["timestamp"].timestamp() * 1000)
            for r in rows] == [(a.topic, a.partition, a.offset, a.key, a.value, a.timestamp)
                               for a in acked if a.partition == 1 and 4 <= a.offset < 25]
    assert [b.num_rows for b in batches] == [8, 8, 5]


def test_a_range_ending_on_a_transaction_marker_reads_without_waiting(kafka_peer: KafkaPeer) -> None:
    """A committed transaction's marker occupies the range's last offset: the read stops on position (a read
    that waited for a record there would raise after read_timeout_s)."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    tx = Producer({"bootstrap.servers": kafka_peer.bootstrap_servers(), "transactional.id": unique_topic("tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for v in (b"a", b"b"):
        tx.produce(topic, v, partition=0)
    tx.flush(30)
    tx.commit_transaction(30)  # offsets 0, 1; the marker at 2
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], reader="native", read_timeout_s=0.5)
    assert _read(cfg, PartitionMetadata(topic, 0, 2, 3, 0, "topo"), 10, ["value"]) == []
    assert pa.Table.from_batches(_read(cfg, PartitionMetadata(topic, 0, 0, 3, 2, "topo"), 10, ["value"])) \
        .column("value").to_pylist() == [b"a", b"b"]


@pytest.mark.timeout(120)
def test_a_range_past_the_log_end_times_out_as_unavailable(kafka_peer: KafkaPeer) -> None:
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(5, 1))
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], reader="native", read_timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(PartitionUnavailableError, match="no progress at offset 5"):
        _read(cfg, PartitionMetadata(topic, 0, 2, 9, 7, "topo"), 100, ["value"])
    assert time.monotonic() - start >= 0.5


def test_a_down_broker_makes_the_read_unavailable_then_it_reads_the_same(kafka_cluster: MockKafkaCluster) -> None:
    topic = unique_topic()
    kafka_cluster.create_topic(topic, 1)
    kafka_cluster.set_leader(topic, 0, 2)
    produce(kafka_cluster.bootstrap_servers(), topic, spread(12, 1))
    cfg = config(kafka_cluster.bootstrap_servers(), topics=[topic], reader="native", read_timeout_s=1.0)
    meta = PartitionMetadata(topic, 0, 2, 8, 6, "topo")
    before = pa.Table.from_batches(_read(cfg, meta, 100, ["offset", "value"]))
    kafka_cluster.broker_down(2)
    with pytest.raises(PartitionUnavailableError):
        _read(cfg, meta, 100, ["offset", "value"])
    kafka_cluster.broker_up(2)
    assert pa.Table.from_batches(_read(cfg, meta, 100, ["offset", "value"])).equals(before)
    assert before.column("offset").to_pylist() == list(range(2, 8))


def test_records_deleted_before_they_were_read_are_data_loss(kafka_peer: KafkaPeer) -> None:
    """A range whose start is below the log start raises DataLossError naming both offsets, never reads on."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(10, 1))
    kafka_peer.delete_records(topic, 0, 6)
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], reader="native", read_timeout_s=5.0)
    with pytest.raises(DataLossError) as info:
        _read(cfg, PartitionMetadata(topic, 0, 2, 10, 8, "topo"), 100, ["value"])
    assert (info.value.next_offset, info.value.log_start) == (2, 6)


def test_librdkafka_log_lines_reach_the_product_logger(caplog: pytest.LogCaptureFixture) -> None:
    """The native reader's librdkafka logs (here: a broker that refuses connections) go where confluent-kafka's do."""
    cfg = KafkaSpoutConfig("127.0.0.1:9", topics=("t",), reader="native", read_timeout_s=0.5)
    with caplog.at_level(logging.INFO, logger="spouts.kafka.librdkafka"), pytest.raises(PartitionUnavailableError):
        _read(cfg, PartitionMetadata("t", 0, 0, 5, 5, "topo"), 100, ["value"])
    # on confluent-kafka's logger (its conf's "logger", see test_access), as "FAC [client.id] text": a line of
    # another logger that merely names the broker and the client is not one
    lines = [r.getMessage() for r in caplog.records if r.name == LIBRDKAFKA_LOG.name]
    assert any("127.0.0.1:9" in m and " [trident-topo] " in m for m in lines), \
        [(r.name, r.getMessage()) for r in caplog.records]


def test_the_reader_setting_picks_the_reader(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """``native`` where it is not built raises why; ``auto`` warns once and reads through confluent-kafka; a read
    of headers always takes confluent-kafka's; a wrong value is refused."""
    assert native("native")
    assert native("auto")
    assert not native("python")
    monkeypatch.setattr(native_module, "LIBRARY", tmp_path / "missing.so")
    native_module.load.cache_clear()
    monkeypatch.setattr("spouts.kafka.arrow._native_here", _uncached_native_here())
    try:
        with pytest.raises(NativeReaderUnavailableError, match=r"missing\.so is not built \(make venv builds it"):
            native("native")
        with caplog.at_level(logging.WARNING, logger="spouts.kafka.arrow"):
            assert not native("auto")
        assert "reading Kafka through confluent-kafka's messages (more CPU per record)" in caplog.text
    finally:
        native_module.load.cache_clear()
    with pytest.raises(ValueError, match="reader must be one of"):
        KafkaSpoutConfig("b:9092", topics=("t",), reader="jvm")


def _uncached_native_here() -> Any:
    from spouts.kafka import arrow

    return arrow._native_here.__wrapped__


def test_a_read_that_reached_its_end_asks_for_nothing_more(kafka_peer: KafkaPeer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A range ending at the log end returns once its last record is read: with a 10 s wait per consume, a read that
    asked librdkafka for more after its last record would wait there (it did, 50 ms a range, before)."""
    from spouts.kafka.native import batches

    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    produce(kafka_peer.bootstrap_servers(), topic, spread(30, 1))
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], reader="native", read_timeout_s=30.0)
    assert len(pa.Table.from_batches(_read(cfg, PartitionMetadata(topic, 0, 0, 30, 30, "topo"), 100, ["value"]))) == 30
    monkeypatch.setattr(batches, "POLL_S", 10.0)
    start = time.monotonic()
    rows = pa.Table.from_batches(_read(cfg, PartitionMetadata(topic, 0, 10, 30, 20, "topo"), 100, ["offset"]))
    assert rows.column("offset").to_pylist() == list(range(10, 30))
    assert time.monotonic() - start < 5.0


def test_a_spout_says_how_its_reads_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The line a pipeline logs at start-up: the native reader, or confluent-kafka's messages and why."""
    from spouts.kafka import KafkaSpout

    spout = KafkaSpout(KafkaSpoutConfig("b:9092", topics=("t",)), "topo")
    assert spout.describe_read(["topic", "partition", "offset", "value"]).startswith("the native reader")
    assert "headers, which the native reader does not build" in spout.describe_read(None)
    python = KafkaSpout(KafkaSpoutConfig("b:9092", topics=("t",), reader="python"), "topo")
    assert python.describe_read(["value"]) == "confluent-kafka's messages (kafka.reader: python)"
    monkeypatch.setattr(native_module, "LIBRARY", tmp_path / "missing.so")
    native_module.load.cache_clear()
    monkeypatch.setattr("spouts.kafka.arrow._native_here", _uncached_native_here())
    try:
        why = spout.describe_read(["value"])
        assert why.startswith("confluent-kafka's messages (the native reader is unavailable: "), why
        assert "missing.so is not built" in why
        demanded = KafkaSpout(KafkaSpoutConfig("b:9092", topics=("t",), reader="native"), "topo")
        said = demanded.describe_read(["value"])  # a line, not the start-up's failure: the read tasks raise why
        assert said.startswith("the native reader (kafka.reader: native), which does not load on the driver: "), said
    finally:
        native_module.load.cache_clear()


def test_polling_reuses_the_readers_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    """``poll`` runs after every chunk, so after every record at batch size 1 (a txid's bad records): it hands the
    library the buffers the reader made once, and allocates none."""
    cfg = KafkaSpoutConfig("127.0.0.1:9", topics=("t",))
    reader, _ = NativeReader.open(cfg.consumer_config("topo", range_records=5))
    handed: list[list[Any]] = []  # the text and log-line buffers each poll hands the library (kept alive)

    class Recording:
        """The library, recording the buffers ``rr_told`` and ``rr_logs`` are given."""

        def __init__(self, lib: Any) -> None:
            self.lib = lib

        def __getattr__(self, name: str) -> Any:
            return getattr(self.lib, name)

        def rr_told(self, handle: Any, text: Any, size: int) -> int:
            handed.append([text])
            return int(self.lib.rr_told(handle, text, size))

        def rr_logs(self, handle: Any, lines: Any, dropped: Any) -> int:
            handed[-1].append(lines)
            return int(self.lib.rr_logs(handle, lines, dropped))

    try:
        def refuse(*_: Any) -> None:
            msg = "poll allocated a buffer"
            raise AssertionError(msg)

        monkeypatch.setattr(reader, "_lib", Recording(reader._lib))
        monkeypatch.setattr("spouts.kafka.native.ctypes.create_string_buffer", refuse)
        for _ in range(3):
            reader.poll(0)
    finally:
        monkeypatch.undo()
        reader.close()
    assert [len(h) for h in handed] == [2, 2, 2]
    for text, lines in handed[1:]:  # the same two buffers every time: made once, at open
        assert text is handed[0][0]
        assert lines is handed[0][1]


_AFTER_CLOSE = """
import sys
from spouts.kafka.config import KafkaSpoutConfig
from spouts.kafka.native import NativeReader

reader, _ = NativeReader.open(KafkaSpoutConfig("127.0.0.1:9", topics=("t",)).consumer_config("topo"))
reader.close()
calls = {"read": lambda: reader.read(0, 5, 5, 0.1, keys=True), "assign": lambda: reader.assign("t", 0, 0),
         "unassign": reader.unassign, "watermarks": lambda: reader.watermarks("t", 0, 0.1),
         "poll": lambda: reader.poll(0), "held_bytes": lambda: reader.held_bytes, "close": reader.close}
try:
    calls[sys.argv[1]]()
except Exception as e:
    print(type(e).__name__, isinstance(e, RuntimeError), e)
else:
    print("no error")
"""


@pytest.mark.parametrize("method", ["read", "assign", "unassign", "watermarks", "poll", "held_bytes", "close"])
def test_every_method_of_a_closed_reader_raises_saying_so(method: str) -> None:
    """After ``close()`` the C handle is gone: each method raises a RuntimeError that names the reader and the
    call, never hands NULL to the library (run in a child process: a NULL handle there is a SIGSEGV)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _AFTER_CLOSE, method], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, f"the child died with {done.returncode}: {done.stderr[-2000:]}"
    said = done.stdout.strip()
    assert said.startswith("NativeReaderClosedError True "), said
    assert f"{method}() after close()" in said, said
    assert "trident-topo" in said, said


def test_a_fresh_reader_copies_an_empty_key_and_value_first(kafka_peer: KafkaPeer) -> None:
    """A reader's first record with an empty (not null) key and value: nothing to copy, into buffers not made yet
    (copying 0 bytes to a null pointer is undefined behaviour: ``make test-native-sanitized`` stops on it)."""
    topic = unique_topic()
    kafka_peer.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": kafka_peer.bootstrap_servers()})
    p.produce(topic, b"", key=b"", partition=0)
    p.produce(topic, b"v", key=b"k", partition=0)
    assert p.flush(30) == 0
    cfg = config(kafka_peer.bootstrap_servers(), topics=[topic], read_timeout_s=10.0)
    reader, _ = NativeReader.open(cfg.consumer_config("topo"))
    try:
        meta = PartitionMetadata(topic, 0, 0, 2, 2, "topo")
        schema = pa.schema([f for f in SCHEMA if f.name in ("key", "value")])
        rows = pa.Table.from_batches(list(read_native(reader, meta, schema, batch_size=1, read_timeout_s=10.0)))
        assert rows.to_pylist() == [{"key": b"", "value": b""}, {"key": b"k", "value": b"v"}]
    finally:
        reader.close()


def test_a_build_of_an_older_rangeread_c_is_unavailable_saying_rebuild(tmp_path: Any) -> None:
    """A library that lacks a function this module calls (a build from before ``rr_held_bytes``, here renamed away)
    is unavailable with the reason, never an AttributeError out of ``available()`` (``auto`` falls back on it)."""
    import shutil
    import subprocess
    import sys

    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler here to build the older library with")
    old = tmp_path / "old.so"
    built = subprocess.run(["bash", str(Path(native_module.__file__).with_name("build.sh"))],
                           env={**os.environ, "RANGEREAD_OUT": str(old), "RANGEREAD_INSTALL_HEADERS": "no",
                                "RANGEREAD_CFLAGS": "-O0 -Drr_held_bytes=rr_held_bytes_later"},
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    said = subprocess.run([sys.executable, "-c", ("import pathlib, sys; from spouts.kafka import native; "
                           "native.LIBRARY = pathlib.Path(sys.argv[1]); print(native.available())"), str(old)],
                          capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr[-2000:]
    assert "was built from another rangeread.c (" in said.stdout, said.stdout
    assert "rr_held_bytes" in said.stdout, said.stdout
