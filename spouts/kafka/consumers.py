"""A per-process pool of Kafka consumers, keyed by their configuration.

Spark executors read many ranges per process; creating a librdkafka client per read would cost
more than the read. A read leases a consumer, assigns it, and gives it back. After a ``fork`` the
inherited clients are unusable, so a pool seen from a new pid starts empty (without closing them).
Every pooled consumer reports refusals to an :class:`~spouts.kafka.access.AccessWatch`: a lease whose body
failed while the cluster refused the client raises :class:`~spouts.errors.AccessRefusedError` instead.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

from confluent_kafka import Consumer, KafkaException

from spouts.errors import AccessRefusedError
from spouts.kafka.access import AccessWatch, refused, serve, watched

_MAX_IDLE_PER_CONFIG = 4

ConfigKey = tuple[tuple[str, str], ...]


class PooledClient(Protocol):
    """What the pool needs of a client: serve its callbacks, close it."""

    def poll(self, timeout: float) -> Any: ...

    def close(self) -> Any: ...


C = TypeVar("C", bound=PooledClient)


def open_consumer(conf: dict[str, str]) -> tuple[Consumer, AccessWatch]:
    """A confluent-kafka consumer for ``conf`` and the watch its error callback reports to."""
    watched_conf, watch = watched(conf)
    return Consumer(watched_conf), watch


def config_key(conf: Mapping[str, object]) -> ConfigKey:
    return tuple(sorted((str(k), str(v)) for k, v in conf.items()))


class ConsumerPool(Generic[C]):
    """Idle consumers by frozen configuration; a lease is exclusive, so threads never share one. ``open_client``
    makes one (:func:`open_consumer` for confluent-kafka's, ``NativeReader.open`` for the native reader's)."""

    def __init__(self, open_client: Callable[[dict[str, str]], tuple[C, AccessWatch]]) -> None:
        self._open = open_client
        self._lock = threading.Lock()
        self._idle: dict[ConfigKey, list[C]] = {}
        self._watches: dict[int, AccessWatch] = {}  # id(consumer) -> its error callback
        self._pid = os.getpid()
        self.created = 0

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's clients are not ours to use or close
            self._idle, self._watches, self._pid, self.created = {}, {}, os.getpid(), 0

    @contextmanager
    def lease(self, conf: Mapping[str, object]) -> Iterator[C]:
        """A consumer for ``conf``, returned to the pool afterwards (closed instead if the body raised)."""
        key = config_key(conf)
        with self._lock:
            self._check_pid()
            idle = self._idle.get(key)
            consumer = idle.pop() if idle else None
        if consumer is None:
            consumer, new_watch = self._open(dict(key))
            with self._lock:
                self.created += 1
                self._watches[id(consumer)] = new_watch
        try:
            yield consumer
        except BaseException as e:
            refusal = None
            if isinstance(e, KafkaException):  # a refusal carried by the request (a missing ACL)
                refusal = refused(e.args[0] if e.args else None, dict(key))
            if refusal is None and not isinstance(e, AccessRefusedError):
                refusal = self._refusal(consumer)  # told only to the error callback (credentials, certificate)
            self._forget(consumer)
            if refusal is not None:
                raise refusal from e
            raise
        with self._lock:
            watch = self._watches.get(id(consumer))
        if watch is not None:
            watch.clear()  # the body succeeded: what was told before is no verdict on later requests
        with self._lock:
            self._check_pid()
            idle = self._idle.setdefault(key, [])
            if len(idle) < _MAX_IDLE_PER_CONFIG:
                idle.append(consumer)
                consumer = None
        if consumer is not None:
            self._forget(consumer)

    def _refusal(self, consumer: C) -> AccessRefusedError | None:
        """The refusal ``consumer`` was told of (its queued callbacks served first)."""
        with self._lock:
            watch = self._watches.get(id(consumer))
        if watch is None:
            return None
        serve(consumer)
        return watch.refusal

    def _forget(self, consumer: C) -> None:
        with self._lock:
            self._watches.pop(id(consumer), None)
        _close_quietly(consumer)

    def close_all(self, bootstrap_servers: str | None = None) -> None:
        """Close idle consumers (only those for ``bootstrap_servers`` if given): tests, shutdown."""
        with self._lock:
            self._check_pid()
            doomed = [k for k in self._idle if bootstrap_servers is None
                      or dict(k).get("bootstrap.servers") == bootstrap_servers]
            consumers = [c for k in doomed for c in self._idle.pop(k)]
        for c in consumers:
            self._forget(c)


def _close_quietly(consumer: PooledClient) -> None:
    with contextlib.suppress(RuntimeError, KafkaException):  # already closed, or the cluster is gone: nothing to release
        consumer.close()


#: The process-wide pool used by the spouts and the Arrow reader.
POOL: ConsumerPool[Consumer] = ConsumerPool(open_consumer)
