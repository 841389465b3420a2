"""One scenario's pipeline on the replicated cluster: its topic (replication factor 3), a steady producer whose
delivery reports are the truth, the service process(es), a watch of their commits, and the key-by-key comparison.

The watch reads each service's ``/metrics`` (never Cassandra, which the scenarios take down): the committed txid
as it moves, the unknown LWT outcomes and their resolutions, and which kinds of state request are in flight, so a
fault can be aimed at the commit's LWTs, the txid store's writes or the lease's.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.chaos.truth import TruthProducer, compare
from tests.replicas.cluster import DATA_CENTRE, KEYSPACE, REPLICATION, Cluster
from tests.service.helpers import ServiceProcess, free_port, word_count_config

WARM_COMMITS = 5  # commits a scenario waits for before its first fault
REQUEST_TIMEOUT_S = 10.0  # the service's cassandra.request_timeout_s: the stall goal is twice this
_SAMPLE = re.compile(r"^(trident_[a-z_]+)\{([^}]*)\} ([0-9.e+-]+)$", re.MULTILINE)


def metrics(service: ServiceProcess, timeout: float = 1.0) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The service's samples by (name, labels); empty while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out = {}
    for name, labels, value in _SAMPLE.findall(text):
        pairs = frozenset(tuple(p.split("=", 1)) for p in re.findall(r'\w+="[^"]*"', labels))
        out[(name, frozenset((k, v.strip('"')) for k, v in pairs))] = float(value)
    return out


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


class KeyedTruthProducer(TruthProducer):
    """The chaos lanes' producer with a sequence number as each record's Kafka key, so a record whose delivery
    report was an error can still be found in the log: with brokers restarting, a produce request can be written
    and replicated while the producer only sees its error (a broker gone before it answered). Such a record is in
    the log, so the service counts it, but not in the delivery reports' truth. :meth:`settle_uncertain` reads the
    log with a plain consumer (``read_committed``, nothing of the product's) and adds exactly the records of failed
    deliveries it finds there."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uncertain: dict[bytes, tuple[str, ...]] = {}  # key -> words of a record whose delivery report failed
        self.landed_uncertain = 0

    def _produce(self, partition: int, sink: Any) -> None:
        words, key = self._words(), str(self.sent).encode()

        def report(err: Any, msg: Any, words: tuple[str, ...] = words, key: bytes = key) -> None:
            if err is not None:
                with self._lock:
                    self.uncertain[key] = words
            sink(err, msg, words)

        self._producer.produce(self.topic, " ".join(words).encode(), key=key, partition=partition, on_delivery=report)
        self.sent += 1

    def settle_uncertain(self, bootstrap: str) -> int:
        """Add to the truth every record of a failed delivery that is in the log (committed); how many."""
        from confluent_kafka import Consumer, TopicPartition

        if not self.uncertain:
            return 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"truth-{self.topic}",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            ends = {}
            for p in range(self.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=60)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(self.topic, p, 0) for p in ends])
            deadline = time.monotonic() + 300
            while ends and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is None or m.error():
                    continue
                key, partition, offset = m.key(), m.partition(), m.offset()
                assert isinstance(key, bytes)
                assert partition is not None
                assert offset is not None
                if key in self.uncertain:
                    with self._lock:
                        if (partition, offset) not in self.records:
                            self._accept(partition, offset, self.uncertain[key])
                            self.landed_uncertain += 1
                if offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
            if ends:
                raise AssertionError(f"the log of {self.topic} was not read to its end: partitions {sorted(ends)} left")
        finally:
            consumer.close()
        return self.landed_uncertain


@dataclass
class Outcome:
    """What one scenario's run came to."""

    records: int = 0
    aborted_transactions: int = 0
    keys: int = 0
    words: int = 0
    lost: int = 0
    twice: int = 0
    differing: int = 0
    duplicated_rows: int = 0  # a key stored in two rows (two shards)
    failed_deliveries: int = 0  # records whose delivery report was an error
    landed_anyway: int = 0  # of those, found in the log (so in the truth)
    unknown: Counter[str] = field(default_factory=Counter)  # resolution -> count
    stalls: list[tuple[str, float]] = field(default_factory=list)  # (fault, longest commit gap around it)
    exit_code: int | None = None

    def exact(self) -> bool:
        return self.lost == self.twice == self.differing == self.duplicated_rows == 0

    def line(self) -> str:
        stalls = ", ".join(f"{f}: {s:.1f} s" for f, s in self.stalls) or "none"
        return (f"{self.records} records ({self.aborted_transactions} transactions aborted; {self.failed_deliveries} "
                f"failed deliveries, {self.landed_anyway} of them in the log all the same), {self.keys} keys, "
                f"{self.words} words: lost {self.lost}, twice {self.twice}, keys differing {self.differing}, "
                f"rows duplicated {self.duplicated_rows}; unknown LWT outcomes {dict(self.unknown) or 0}; "
                f"longest commit stall per fault: {stalls}; exit {self.exit_code}")


class ReplicaRun:
    """A word count of one scenario on ``cluster``: the topic, table and pipeline are named ``name``."""

    def __init__(self, cluster: Cluster, name: str, workdir: Path, *, shards: int = 0, partitions: int = 4,
                 rate: float = 150.0, transactional: bool = False, abort_ratio: float = 0.0,
                 lease_ttl_s: float = 30.0, contact_points: list[list[str]] | None = None) -> None:
        self.cluster, self.name, self.shards = cluster, name, shards
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic, self.table = name, f"wc_{name.replace('-', '_')}"
        cluster.create_topic(self.topic, partitions)
        self.producer = KeyedTruthProducer(cluster.bootstrap, self.topic, partitions, rate=rate, seed=len(name),
                                      transactional_id=f"{name}-producer" if transactional else None,
                                      abort_ratio=abort_ratio)
        self.services = [self._service(i, points, lease_ttl_s)
                         for i, points in enumerate(contact_points or [cluster.contact_points])]
        self.commits: list[tuple[float, int]] = []  # (monotonic, committed txid) as first seen
        self.samples: dict[int, dict[tuple[str, frozenset[tuple[str, str]]], float]] = {}
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watching, name=f"watch-{name}", daemon=True)

    def _service(self, i: int, contact_points: list[str], lease_ttl_s: float) -> ServiceProcess:
        port = free_port()
        path = self.dir / f"service-{i}.yaml"
        cassandra = {"contact_points": contact_points, "port": self.cluster.cql_port, "keyspace": KEYSPACE,
                     "local_dc": DATA_CENTRE, "request_timeout_s": REQUEST_TIMEOUT_S, "replication": REPLICATION,
                     "shards": self.shards}
        word_count_config(path, bootstrap=self.cluster.bootstrap, topic=self.topic, port=port,
                          state={"backend": "cassandra", "table": self.table}, cassandra=cassandra,
                          pipeline_id=self.name, caps=(500, 2000))
        doc = yaml.safe_load(path.read_text())
        doc["kafka"].update({"request_timeout_s": 15, "read_timeout_s": 30})
        p = doc["pipelines"][0]
        p["lease_ttl_s"] = lease_ttl_s
        p["outage_limit_s"] = 900  # the scenarios' outages are minutes at most: the service rides them out
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return ServiceProcess(path, self.dir / f"service-{i}.log", port)

    # -- running ---------------------------------------------------------------------------------

    def begin(self, first_commit_s: float = 300.0) -> ServiceProcess:
        """Start the producer and the first service; return it once it committed :data:`WARM_COMMITS` txids (the
        faults meet a pipeline in its steady state, not a new cluster's and a new process's first, cold commits)."""
        self.producer.start()
        service = self.services[0].start()
        self._watch.start()
        self.wait_commits(1, first_commit_s)
        self.wait_commits(WARM_COMMITS, first_commit_s)
        return service

    def say(self, line: str) -> None:
        print(f"replicas: {self.name} +{time.monotonic() - self.started:.0f}s: {line}", flush=True)

    def _watching(self) -> None:
        last = -1
        while not self._stop.is_set():
            for i, s in enumerate(self.services):
                if s.proc is None or s.proc.poll() is not None:
                    continue
                got = metrics(s, timeout=0.5)
                if got:
                    self.samples[i] = got
                    txid = int(sample(got, "trident_committed_txid", pipeline=self.name))
                    if txid > last:
                        self.commits.append((time.monotonic(), txid))
                        last = txid
            self._stop.wait(0.1)

    def committed(self) -> int:
        return self.commits[-1][1] if self.commits else 0

    def wait_commits(self, more: int, timeout: float, since: float | None = None) -> float:
        """Wait until ``more`` txids committed after ``since`` (now by default); seconds it took. Fails the test
        with the service's log tail when they do not."""
        t0 = time.monotonic() if since is None else since
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(1 for t, _ in self.commits if t > t0) >= more:
                return time.monotonic() - t0
            ran = [s for s in self.services if s.proc is not None]
            if ran and all(s.proc is not None and s.proc.poll() is not None for s in ran):
                raise AssertionError(f"{self.name}: every service exited:\n" + "\n".join(s.tail(40) for s in ran))
            time.sleep(0.1)
        tails = "\n".join(s.tail(30) for s in self.services if s.proc is not None)
        raise AssertionError(f"{self.name}: no {more} commits in {timeout:.0f} s (committed txid {self.committed()})"
                             f":\n{tails}")

    def in_flight(self, service: ServiceProcess, kind: str, timeout: float = 60.0) -> bool:
        """Wait until state requests of ``kind`` (cas, write, read, lease) are being sent (their counter moved
        between two looks 20 ms apart); False if none in ``timeout``."""
        before = sample(metrics(service), "trident_state_requests_total", pipeline=self.name, kind=kind)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.02)
            now = sample(metrics(service), "trident_state_requests_total", pipeline=self.name, kind=kind)
            if now != before:
                return True
        return False

    def longest_gap(self, t0: float, t1: float) -> float:
        """The longest time without a commit that overlaps [t0, t1]."""
        times = [t for t, _ in self.commits]
        gap = 0.0
        for a, b in itertools.pairwise(times):
            if b > t0 and a < t1:
                gap = max(gap, b - a)
        before = [t for t in times if t <= t0]
        after = [t for t in times if t > t0]
        if before and not after:
            gap = max(gap, t1 - before[-1])
        return gap

    def unknown_outcomes(self) -> Counter[str]:
        """Unknown LWT outcomes the services reported, by resolution (applied, not_applied, unresolved)."""
        out: Counter[str] = Counter()
        for got in self.samples.values():
            for resolution in ("applied", "not_applied", "unresolved"):
                out[resolution] += int(sample(got, "trident_cas_unknown_outcomes_total", pipeline=self.name,
                                              resolution=resolution))
        return +out

    # -- the end ---------------------------------------------------------------------------------

    def stored(self, session: Any) -> tuple[dict[str, int], int]:
        """The stored counts read at QUORUM, and how many keys were found in more than one row."""
        rows = list(session.execute(f"SELECT word, count FROM {KEYSPACE}.{self.table}"))
        counts = Counter(r["word"] for r in rows)
        return {r["word"]: int(r["count"]) for r in rows}, sum(1 for n in counts.values() if n > 1)

    def finish(self, outcome: Outcome, drain_s: float = 300.0) -> Outcome:
        """Every node up, the producer stopped, the active service drained to the truth and SIGTERMed (exit 0),
        then the stored state compared key by key with the producer's truth."""
        self.cluster.heal()
        self.producer.stop()
        outcome.failed_deliveries = len(self.producer.uncertain)
        outcome.landed_anyway = self.producer.settle_uncertain(self.cluster.bootstrap)
        truth = self.producer.truth()
        session = self.cluster.session()
        try:
            deadline, moved = time.monotonic() + 1800, time.monotonic()
            stored, dup = self._read(session)
            while stored != dict(truth) and time.monotonic() - moved < drain_s and time.monotonic() < deadline:
                time.sleep(1.0)
                now, dup = self._read(session)
                if now != stored:
                    moved = time.monotonic()
                stored = now
            outcome.unknown = self.unknown_outcomes()
            alive = [s for s in self.services if s.proc is not None and s.proc.poll() is None]
            codes = [s.terminate() for s in alive]
            outcome.exit_code = max(codes, default=None)
            stored, dup = self._read(session)
        finally:
            session.cluster.shutdown()
            self._stop.set()
        outcome.records, outcome.aborted_transactions = self.producer.acked, self.producer.aborted
        outcome.keys, outcome.words = len(truth), sum(truth.values())
        outcome.lost, outcome.twice, outcome.differing = compare(truth, stored)
        outcome.duplicated_rows = dup
        self.say(outcome.line())
        from tests.replicas.record import record  # imports this module

        record(self.name.rsplit("-", 1)[0], outcome, time.monotonic() - self.started)
        return outcome

    def _read(self, session: Any) -> tuple[dict[str, int], int]:
        for _ in range(30):
            try:
                return self.stored(session)
            except Exception as e:  # noqa: BLE001 - a node is still coming up: look again
                self.say(f"reading the table failed ({type(e).__name__}); again")
                time.sleep(2.0)
        return self.stored(session)

    def close(self) -> None:
        self._stop.set()
        for s in self.services:
            s.cleanup()
        if self.producer.is_alive():
            self.producer._stop_event.set()  # a failed scenario: no flush wait
        # librdkafka's handle goes with its last reference: it would go on reconnecting to a cluster that is stopped
        self.producer.__dict__.pop("_producer", None)
