"""The producer and the ground truth: every acknowledged record, by (partition, offset), and its words.

The truth is built from the producer's delivery reports only (never from the product): a record counts
when its delivery report says it is in the log and, for transactional producing, its transaction
committed. Records that retention removed before the service read them are excluded by coordinates
(:meth:`TruthProducer.truncated`).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import Any

from confluent_kafka import KafkaException, Producer

VOCABULARY = tuple(f"k{i:02d}" for i in range(64))


class TruthProducer(threading.Thread):
    """Sentences of VOCABULARY words at a steady ``rate``, optionally in committed transactions of
    ``tx_size`` records; :attr:`records` maps (partition, offset) to the words of each acknowledged one."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, rate: float, seed: int,
                 transactional_id: str | None = None, tx_size: int = 20, abort_ratio: float = 0.0) -> None:
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.topic, self.partitions, self.rate, self.tx_size = topic, partitions, rate, tx_size
        self.abort_ratio = abort_ratio  # transactions aborted on purpose: their records are in the log, not the truth
        self.rng = random.Random(seed)
        self.records: dict[tuple[int, int], tuple[str, ...]] = {}
        self.excluded: set[tuple[int, int]] = set()
        self.errors: list[str] = []
        self.transactions = self.aborted = 0
        self.sent = 0
        self._lock = threading.Lock()
        self._stop_event, self._running = threading.Event(), threading.Event()
        self._producing = threading.Lock()  # held while a round of records is being produced
        self._running.set()
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                                "message.timeout.ms": 600_000}
        self.transactional = transactional_id is not None
        if transactional_id is not None:
            conf["transactional.id"] = transactional_id
            conf["transaction.timeout.ms"] = 600_000
        self._producer = Producer(conf)
        if self.transactional:
            self._producer.init_transactions(60)

    # -- producing -------------------------------------------------------------------------------

    def run(self) -> None:
        tick = 0.1
        while not self._stop_event.is_set():
            self._running.wait(1.0)
            if self._stop_event.is_set() or not self._running.is_set():
                continue
            n = max(1, round(self.rate * tick))
            with self._producing:
                if not self._running.is_set():
                    continue
                if self.transactional:
                    self._one_transaction(n)
                else:
                    for _ in range(n):
                        self._produce(self.rng.randrange(self.partitions), self._pending_sink(None))
                    self._producer.poll(0)
            self._stop_event.wait(tick)
        self._producer.flush(120)

    def _words(self) -> tuple[str, ...]:
        return tuple(self.rng.choice(VOCABULARY) for _ in range(self.rng.randint(1, 6)))

    def _pending_sink(self, pending: list[tuple[int, int, Any]] | None) -> Any:
        """A delivery callback: an acknowledged record joins the truth now (``pending`` None) or is kept in
        ``pending`` until its transaction commits."""
        def sink(err: Any, msg: Any, payload: Any) -> None:
            with self._lock:
                if err is not None:
                    self.errors.append(str(err))
                elif pending is None:
                    self._accept(msg.partition(), msg.offset(), payload)
                else:
                    pending.append((msg.partition(), msg.offset(), payload))
        return sink

    def _accept(self, partition: int, offset: int, payload: Any) -> None:
        """Record an acknowledged (and committed) record in the truth; called under the lock."""
        self.records[(partition, offset)] = payload

    def _produce(self, partition: int, sink: Any) -> None:
        words = self._words()
        self._producer.produce(self.topic, " ".join(words).encode(), partition=partition,
                               on_delivery=lambda err, msg, w=words: sink(err, msg, w))  # type: ignore[misc]  # defaults bind this call's values
        self.sent += 1

    def _one_transaction(self, n: int) -> None:
        """``n`` records in one transaction; they join the truth when the commit succeeds. A transaction the
        broker makes abortable (a broker killed under it) and one in ``abort_ratio`` on purpose are aborted:
        their records stay in the log, marked aborted, and never join the truth."""
        pending: list[tuple[int, int, Any]] = []
        p = self._producer
        p.begin_transaction()
        for _ in range(min(n, self.tx_size)):
            self._produce(self.rng.randrange(self.partitions), self._pending_sink(pending))
        p.flush(60)  # every delivery report of the transaction, before it commits or aborts
        abort = self.rng.random() < self.abort_ratio
        for _ in range(20):
            try:
                if abort:
                    p.abort_transaction(60)
                else:
                    p.commit_transaction(60)
                break
            except KafkaException as e:
                if e.args[0].retriable():
                    continue
                if e.args[0].txn_requires_abort() and not abort:
                    abort = True
                    continue
                raise
        else:
            raise RuntimeError(f"transaction neither committed nor aborted after 20 tries (abort: {abort})")
        with self._lock:
            if abort:
                self.aborted += 1
                return
            self.transactions += 1
            for part, off, payload in pending:
                self._accept(part, off, payload)

    def burst(self, partition: int, n: int) -> list[int]:
        """Produce ``n`` records to ``partition`` now and wait for them; their offsets, ascending."""
        pending: list[tuple[int, int, tuple[str, ...]]] = []
        if self.transactional:
            raise RuntimeError("burst is for the non-transactional producer")
        sink = self._pending_sink(pending)
        for _ in range(n):
            self._produce(partition, sink)
        assert self._producer.flush(60) == 0
        with self._lock:
            for part, off, payload in pending:
                self._accept(part, off, payload)
        return sorted(off for _, off, _ in pending)

    # -- control ---------------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop producing and wait until everything sent is acknowledged."""
        self._running.clear()
        with self._producing:  # the round in progress, if any, is finished
            assert self._producer.flush(120) == 0

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop_event.set()
        self._running.set()
        if self.is_alive():
            self.join(180)
        assert self._producer.flush(120) == 0

    def truncated(self, partition: int, before: int, after: int = -1) -> int:
        """Retention removed offsets ``(after, before)`` of ``partition`` before the service read them:
        those records leave the truth. Returns how many acknowledged records that was."""
        with self._lock:
            gone = {k for k in self.records if k[0] == partition and after < k[1] < before}
            self.excluded |= gone
        return len(gone)

    # -- the truth -------------------------------------------------------------------------------

    def truth(self) -> Counter[str]:
        with self._lock:
            return Counter(w for k, words in self.records.items() if k not in self.excluded for w in words)

    @property
    def acked(self) -> int:
        with self._lock:
            return len(self.records)


def compare(truth: Counter[str], stored: dict[str, int]) -> tuple[int, int, int]:
    """(lost, counted twice, keys differing), key by key."""
    lost = twice = differing = 0
    for key in set(truth) | set(stored):
        diff = stored.get(key, 0) - truth.get(key, 0)
        lost += max(0, -diff)
        twice += max(0, diff)
        differing += diff != 0
    return lost, twice, differing
