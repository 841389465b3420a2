"""The native range reader: librdkafka's messages copied into Arrow buffers in C (``rangeread.c``).

confluent-kafka hands out one Python object per message, which costs more CPU than librdkafka's fetch
itself; this reader builds a chunk of records as column buffers in C and Python wraps each chunk as
one record batch. It reads keys, values, offsets and timestamps; a read that asks for headers goes
through confluent-kafka. Built by ``build.sh`` (``make venv``, and ``pip install .`` where a C compiler and
librdkafka's headers are at hand) without linking librdkafka: :func:`load` lends it the librdkafka confluent-kafka
loaded, so both readers run one librdkafka. :func:`load` says why it is unavailable when it is.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from collections.abc import Mapping
from functools import cache
from pathlib import Path

import confluent_kafka  # noqa: F401  (loads the librdkafka the native library links against, before it)
from confluent_kafka import KafkaError, KafkaException

from spouts.kafka.access import LIBRDKAFKA_LOG, AccessWatch
from spouts.kafka.consumers import ConsumerPool

#: The library: beside this module (the tests point it at a sanitized build: ``make test-native-sanitized``).
LIBRARY = Path(__file__).with_name("_rangeread.so")
TEXT = 512
#: A chunk's values (and keys) stop growing past this many bytes; the rest waits for the next chunk.
CHUNK_BYTES = 64 * 1024 * 1024


class Chunk(ctypes.Structure):
    """``rr_chunk``: one read's records as column buffers (owned by the reader, valid until its next read)."""

    _fields_ = [
        ("count", ctypes.c_int64), ("pos", ctypes.c_int64),
        ("offsets", ctypes.c_void_p),
        ("timestamps_us", ctypes.c_void_p), ("timestamp_valid", ctypes.c_void_p), ("timestamps_missing", ctypes.c_int64),
        ("value_offsets", ctypes.c_void_p), ("values", ctypes.c_void_p), ("value_valid", ctypes.c_void_p),
        ("values_null", ctypes.c_int64),
        ("key_offsets", ctypes.c_void_p), ("keys", ctypes.c_void_p), ("key_valid", ctypes.c_void_p),
        ("keys_null", ctypes.c_int64),
        ("err", ctypes.c_int32), ("fatal", ctypes.c_int32),
        ("err_offset", ctypes.c_int64), ("err_str", ctypes.c_char * TEXT),
    ]


class _LogLine(ctypes.Structure):
    _fields_ = [("level", ctypes.c_int), ("fac", ctypes.c_char * 32), ("text", ctypes.c_char * TEXT)]


class NativeReaderUnavailableError(RuntimeError):
    """The native reader is not built, or does not load here."""


class NativeReaderClosedError(RuntimeError):
    """A method of a :class:`NativeReader` called after its ``close()`` (the C handle is gone)."""


@cache
def load() -> ctypes.CDLL:
    """The native library; raises :class:`NativeReaderUnavailableError` with the reason."""
    if not LIBRARY.exists():
        msg = f"{LIBRARY} is not built (make venv builds it: a C compiler and librdkafka's headers)"
        raise NativeReaderUnavailableError(msg)
    try:
        _share_librdkafka()
        lib = ctypes.CDLL(str(LIBRARY))
    except OSError as e:
        msg = f"{LIBRARY} does not load ({e}); rebuild it with spouts/kafka/native/build.sh"
        raise NativeReaderUnavailableError(msg) from e
    try:
        _declare(lib)
    except AttributeError as e:  # a function this module calls is missing: a build of an older rangeread.c
        msg = f"{LIBRARY} was built from another rangeread.c ({e}); rebuild it with spouts/kafka/native/build.sh"
        raise NativeReaderUnavailableError(msg) from e
    if lib.rr_chunk_size() != ctypes.sizeof(Chunk) or lib.rr_log_line_size() != ctypes.sizeof(_LogLine):
        msg = f"{LIBRARY} was built from another rangeread.c; rebuild it with spouts/kafka/native/build.sh"
        raise NativeReaderUnavailableError(msg)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    """The C signatures of the library's functions (ctypes would guess ``int`` for each)."""
    vp, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
    lib.rr_open.restype = vp
    lib.rr_open.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
                            ctypes.c_char_p, sz]
    lib.rr_close.argtypes = [vp]
    lib.rr_assign.argtypes = [vp, ctypes.c_char_p, i32, i64]
    lib.rr_unassign.argtypes = [vp]
    lib.rr_watermarks.argtypes = [vp, ctypes.c_char_p, i32, ctypes.POINTER(i64), ctypes.POINTER(i64), ctypes.c_int]
    lib.rr_told.argtypes = [vp, ctypes.c_char_p, sz]
    lib.rr_logs.argtypes = [vp, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.rr_read.argtypes = [vp, i64, i64, i64, i64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.POINTER(Chunk))]
    lib.rr_held_bytes.argtypes = [vp]
    lib.rr_chunk_size.restype = lib.rr_log_line_size.restype = lib.rr_held_bytes.restype = sz


def _share_librdkafka() -> None:
    """Makes the librdkafka confluent-kafka loaded (privately, with its extension) resolve the library's symbols:
    the library is built without linking one (``build.sh``), so it runs the copy confluent-kafka ships."""
    maps = Path("/proc/self/maps")
    loaded = {line.split(maxsplit=5)[5].strip() for line in maps.read_text().splitlines()
              if "librdkafka" in line and len(line.split(maxsplit=5)) == 6} if maps.exists() else set()
    if not loaded:
        msg = "confluent-kafka's librdkafka is not found among the process's libraries (/proc/self/maps)"
        raise OSError(msg)
    shipped = {path for path in loaded if "confluent_kafka" in path}  # its wheel's copy, when another is loaded too
    for path in shipped or loaded:  # RTLD_NOLOAD: promote what is there, never load another copy
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL | os.RTLD_NOLOAD)


def available() -> str | None:
    """None when the native reader loads here, else why not."""
    try:
        load()
    except NativeReaderUnavailableError as e:
        return str(e)
    return None


#: syslog levels (librdkafka's) as logging levels
_LEVELS = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR, 4: logging.WARNING,
           5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}


class NativeReader:
    """One librdkafka consumer, assign-only, read in chunks. Not thread-safe: the pool leases it to one reader.

    After :meth:`close` every method raises :class:`NativeReaderClosedError` (a RuntimeError, as confluent-kafka's
    closed consumer raises): the library is never handed the NULL handle. Each call holds the reader's lock while
    it uses the handle, so a ``close`` from another thread waits for it instead of freeing the handle under it.
    """

    def __init__(self, conf: Mapping[str, str], watch: AccessWatch) -> None:
        lib = load()
        names = [str(k).encode() for k in conf]
        values = [str(v).encode() for v in conf.values()]
        err = ctypes.create_string_buffer(TEXT)
        handle = lib.rr_open(len(names), (ctypes.c_char_p * len(names))(*names),
                             (ctypes.c_char_p * len(values))(*values), err, TEXT)
        if not handle:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, err.value.decode(errors="replace")))  # librdkafka's local error codes are public, named with a leading underscore
        self._lib, self._handle, self._watch = lib, handle, watch
        # what poll hands the library to fill, made once: a chunk of one record (batch_size 1) polls too
        self._told, self._lines = ctypes.create_string_buffer(TEXT), (_LogLine * int(lib.rr_log_capacity()))()
        self._dropped = ctypes.c_int()
        self._name = str(conf.get("client.id", "rdkafka"))
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @classmethod
    def open(cls, conf: Mapping[str, str]) -> tuple[NativeReader, AccessWatch]:
        """A reader for ``conf`` and the watch its error callback reports to (the pool's opener)."""
        watch = AccessWatch(conf)
        return cls(conf, watch), watch

    def assign(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._check(self._lib.rr_assign(self._live("assign"), topic.encode(), partition, offset))

    def unassign(self) -> None:
        with self._lock:
            self._check(self._lib.rr_unassign(self._live("unassign")))

    def read(self, pos: int, end: int, max_records: int, timeout_s: float, *, keys: bool,
             max_bytes: int = CHUNK_BYTES) -> Chunk:
        """The records of the assigned partition at offsets ``[pos, end)``, at most ``max_records`` and (past the
        first) ``max_bytes`` of values and of keys: see ``rr_read``. The chunk is valid until the next call."""
        out = ctypes.POINTER(Chunk)()
        with self._lock:
            handle = self._live("read")
            rc = self._lib.rr_read(handle, pos, end, max_records, max_bytes, int(timeout_s * 1000), int(keys),
                                   ctypes.byref(out))
            self._serve(handle)
        if rc == -2:
            msg = f"a record at offset {pos} or later is larger than 2 GiB, more than an Arrow batch holds"
            raise ValueError(msg)
        if rc == -3:
            msg = "the native Kafka reader ran out of memory"
            raise MemoryError(msg)
        return out.contents

    @property
    def held_bytes(self) -> int:
        """The bytes the reader's buffers hold between reads: a large record's buffer is given back once a read
        needs much less, or the range is unassigned (``rr_held_bytes``; librdkafka's own queues are not counted)."""
        with self._lock:
            return int(self._lib.rr_held_bytes(self._live("held_bytes")))

    def watermarks(self, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
        low, high = ctypes.c_int64(), ctypes.c_int64()
        with self._lock:
            self._check(self._lib.rr_watermarks(self._live("watermarks"), topic.encode(), partition,
                                                ctypes.byref(low), ctypes.byref(high), int(timeout_s * 1000)))
        return low.value, high.value

    def poll(self, _timeout: float = 0) -> None:
        """Serve what librdkafka told the callbacks: errors to the watch, log lines to :data:`LIBRDKAFKA_LOG`."""
        with self._lock:
            self._serve(self._live("poll"))

    def _serve(self, handle: int) -> None:
        """:meth:`poll`'s work on a live ``handle`` (the caller holds the lock)."""
        text, lines, dropped = self._told, self._lines, self._dropped
        code = self._lib.rr_told(handle, text, TEXT)
        if code:
            self._watch(KafkaError(code, text.value.decode(errors="replace")))
        for line in lines[:self._lib.rr_logs(handle, lines, ctypes.byref(dropped))]:
            LIBRDKAFKA_LOG.log(_LEVELS.get(line.level, logging.INFO), "%s [%s] %s", line.fac.decode(errors="replace"),
                               self._name, line.text.decode(errors="replace"))
        if dropped.value:
            LIBRDKAFKA_LOG.warning("[%s] %d librdkafka log lines not shown", self._name, dropped.value)

    def close(self) -> None:
        """Close the consumer (in a forked child only forgotten: the parent's threads are not there); a second
        close raises :class:`NativeReaderClosedError`."""
        with self._lock:
            handle = self._live("close")
            self._handle = None
            if os.getpid() == self._pid:
                self._lib.rr_close(handle)

    def _live(self, method: str) -> int:
        """The C handle, or :class:`NativeReaderClosedError` naming the reader and ``method`` once it is closed."""
        handle: int | None = self._handle
        if handle is None:
            msg = f"native Kafka reader {self._name!r} is closed: {method}() after close()"
            raise NativeReaderClosedError(msg)
        return handle

    def _check(self, err: int) -> None:
        if err:
            raise KafkaException(KafkaError(err))


#: The process-wide pool of native readers (the Arrow read path's, beside :data:`spouts.kafka.consumers.POOL`).
NATIVE_POOL: ConsumerPool[NativeReader] = ConsumerPool(NativeReader.open)
