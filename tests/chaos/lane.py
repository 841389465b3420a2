"""A lane: one pipeline under test with its own mock Kafka cluster, CQL peer, producer and service
processes, and the record of what was done to it (kills, faults) and what it committed when."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.chaos.cqlpeer import CqlPeer
from tests.chaos.truth import TruthProducer, compare
from tests.service.helpers import ServiceProcess, free_port, word_count_config

PIPELINE = "chaos"
TABLE = "word_counts"


@dataclass
class Kill:
    """One SIGKILL of a whole service process group: when, aimed where, and where it landed (from the store)."""

    t: float  # monotonic
    aimed: str
    landed: str = ""
    baseline_txid: int = 0  # committed txid once the kill settled
    recovered_s: float | None = None
    stage: str = ""  # how far the killed process had got, from its log
    interrupts: bool = True  # False: another instance was active meanwhile (a standby or a spare in start-up)


def frozen_txids(documents: dict[str, str]) -> set[int]:
    """The txids with a stored plan (keys ``batches/<txid, zero-padded>``)."""
    return {int(k.split("/", 1)[1]) for k in documents if k.startswith("batches/")}


def stage_of(log: str) -> str:
    """How far a service run had got, from what it logged."""
    if "committed txid" in log:
        return "committing txids"
    if "lease epoch" in log:
        return "lease taken, before its first commit"
    if "standby; " in log:
        return "standby"
    if "starting Spark" in log:
        return "Spark starting, store connecting"
    return "Python starting, config read"


@dataclass
class FaultEvent:
    t0: float
    t1: float
    kind: str
    detail: str


@dataclass
class Outcome:
    """What the lane's truth comparison found."""

    records: int = 0
    excluded: int = 0
    keys: int = 0
    words: int = 0
    lost: int = 0
    twice: int = 0
    differing: int = 0
    passed: bool = False
    drained: bool | None = None  # the stored counts reached the truth before the drain window closed
    drain_s: float | None = None  # how long the final drain took (faults and producer stopped)
    notes: list[str] = field(default_factory=list)
    error: str | None = None


class Lane:
    """Everything one scenario drives."""

    def __init__(self, name: str, seed: int, workdir: Path, *, partitions: int = 4, rate: float = 120.0,
                 instances: int = 1, transactional: bool = False, lease_ttl_s: float = 8.0, max_pending: int = 2,
                 caps: tuple[int, int] = (2500, 10000), data_loss: str = "fail") -> None:
        self.name, self.seed, self.rng = name, seed, random.Random(seed)
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.topic, self.partitions = "sentences", partitions
        self.kafka = self.start_kafka()
        self.kafka.create_topic(self.topic, partitions, 3)
        self.peer = self.start_cassandra()
        self.lease_ttl_s, self.max_pending, self.caps = lease_ttl_s, max_pending, caps
        self.services = [self._service(i, data_loss) for i in range(instances)]
        self.producer = TruthProducer(self.kafka.bootstrap_servers(), self.topic, partitions, rate=rate,
                                      seed=seed, transactional_id=f"{name}-producer" if transactional else None)
        self.kills: list[Kill] = []
        self.faults: list[FaultEvent] = []
        self.commits: list[tuple[float, int]] = []  # (monotonic, committed txid) as first seen
        self.started = time.monotonic()
        self.outcome = Outcome()
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name=f"monitor-{name}", daemon=True)

    def start_kafka(self) -> Any:
        """The lane's Kafka: a 3-broker mock cluster (broker loss and leader moves on demand)."""
        return MockKafkaCluster(3)

    def start_cassandra(self) -> Any:
        """The lane's Cassandra: the CQL test server in a process of its own (holds and faults on demand)."""
        return CqlPeer(free_port(), free_port(), self.dir / "cqlpeer.log").start()

    def _service(self, i: int, data_loss: str) -> ServiceProcess:
        port = free_port()
        path = self.dir / f"service-{i}.yaml"
        word_count_config(path, bootstrap=self.kafka.bootstrap_servers(), topic=self.topic, port=port,
                          state={"backend": "cassandra", "table": TABLE, "cache_size": 100},
                          cassandra={"contact_points": ["127.0.0.1"], "port": self.peer.port, "keyspace": "trident",
                                     "local_dc": "datacenter1", "consistency": "ONE", "request_timeout_s": 5},
                          pipeline_id=PIPELINE, caps=self.caps, max_pending=self.max_pending)
        self.configure(path, lease_ttl_s=self.lease_ttl_s, data_loss=data_loss)
        return ServiceProcess(path, self.dir / f"service-{i}.log", port)

    @staticmethod
    def configure(path: Path, *, lease_ttl_s: float | None = None, data_loss: str | None = None) -> None:
        doc = yaml.safe_load(path.read_text())
        p = doc["pipelines"][0]
        if lease_ttl_s is not None:
            p["lease_ttl_s"] = lease_ttl_s
        if data_loss is not None:
            p["spout"]["data_loss"] = data_loss
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    # -- running ---------------------------------------------------------------------------------

    def begin(self) -> None:
        self.producer.start()
        self._monitor.start()

    def _watch(self) -> None:
        last = -1
        while not self._stop.is_set():
            try:
                txid = self.peer.committed_txid(PIPELINE)
            except Exception:  # noqa: BLE001 - the peer is busy; look again
                txid = last
            if txid != last:
                self.commits.append((time.monotonic(), txid))
                last = txid
            self._stop.wait(0.2)

    def committed_txid(self) -> int:
        return self.peer.committed_txid(PIPELINE)

    def stored(self) -> dict[str, int]:
        return {r["word"]: int(r["count"]) for r in self.peer.rows(TABLE)}

    def fault(self, kind: str, detail: str, action: Callable[[], Any] | None = None, hold_s: float = 0.0,
              undo: Callable[[], Any] | None = None) -> None:
        t0 = time.monotonic()
        if action is not None:
            action()
        if hold_s:
            time.sleep(hold_s)
        if undo is not None:
            undo()
        self.faults.append(FaultEvent(t0, time.monotonic(), kind, detail))
        self.say(f"{kind} {detail}")

    def say(self, line: str) -> None:
        print(f"chaos: {self.name} +{time.monotonic() - self.started:.0f}s: {line}", flush=True)

    def kill(self, service: ServiceProcess, aimed: str, before_settle: Callable[[], None] = lambda: None, *,
             interrupts: bool = True) -> Kill:
        """SIGKILL ``service``'s process group; ``before_settle`` then runs (e.g. releasing a held request);
        where it landed is read from the store."""
        k = Kill(time.monotonic(), aimed, stage=stage_of(service.run_log()), interrupts=interrupts)
        service.kill()
        before_settle()
        time.sleep(0.3)
        k.landed, k.baseline_txid = self.landed()
        self.kills.append(k)
        self.say(f"SIGKILL {len(self.kills)} aimed at {aimed} ({k.stage}): {k.landed}, committed txid {k.baseline_txid}")
        return k

    def landed(self) -> tuple[str, int]:
        """Where the last kill left the txid after the committed one: not frozen, frozen with no state
        written, or frozen with some state rows written (the window the freeze exists for)."""
        docs = self.peer.documents(PIPELINE)
        doc = docs.get("coordinator")
        committed = 0 if doc is None else int(json.loads(doc)["committed_txid"])
        if committed + 1 not in frozen_txids(docs):
            return "not frozen", committed
        written = sum(1 for r in self.peer.rows(TABLE) if int(r.get("txid") or 0) == committed + 1)
        return ("frozen, no state written" if written == 0 else "frozen, state partly written"), committed

    # -- the end ---------------------------------------------------------------------------------

    def drain_and_verify(self, stall_s: float = 300.0, limit_s: float = 1800.0) -> Outcome:
        """Stop the faults and the producer, let one instance catch up, SIGTERM it (exit 0), compare.

        The drain lasts while the stored counts keep moving: it gives up after ``stall_s`` with no
        change (or ``limit_s`` in all), so a lane left with a large backlog by its faults still finishes."""
        o = self.outcome
        self.peer.rpc.clear()
        for b in self.kafka.broker_ids:
            self.kafka.broker_up(b)
        self.producer.stop()
        truth = self.producer.truth()
        alive = [s for s in self.services if s.proc is not None and s.proc.poll() is None]
        for s in alive[1:]:
            s.kill()
        if not alive:
            self.services[0].start()
            alive = [self.services[0]]
        service = alive[0]
        t0 = time.monotonic()
        moved = t0
        stored = self.stored()
        while stored != dict(truth) and time.monotonic() - moved < stall_s and time.monotonic() - t0 < limit_s:
            if service.proc is not None and service.proc.poll() is not None:
                o.notes.append(f"exited with {service.proc.returncode} while draining; restarted")
                service.start()
            time.sleep(1.0)
            now = self.stored()
            if now != stored:
                moved = time.monotonic()
            stored = now
        o.drain_s = time.monotonic() - t0
        o.drained = stored == dict(truth)
        if not o.drained:
            behind = sum(max(0, n - stored.get(k, 0)) for k, n in truth.items())
            o.notes.append(f"not drained in {o.drain_s:.0f} s: the stored counts were {behind} words short of "
                           f"the truth and {sum(max(0, v - truth.get(k, 0)) for k, v in stored.items())} over")
        code = service.terminate() if service.proc is not None and service.proc.poll() is None else None
        if code not in (0, None):
            o.notes.append(f"SIGTERM after the drain: exit {code}")
        stored = self.stored()
        o.records, o.excluded = self.producer.acked, len(self.producer.excluded)
        o.keys, o.words = len(truth), sum(truth.values())
        o.lost, o.twice, o.differing = compare(truth, stored)
        o.passed = o.lost == 0 and o.twice == 0 and code in (0, None) and o.error is None
        return o

    def close(self) -> None:
        self._stop.set()
        for s in self.services:
            s.cleanup()
        if self.producer.is_alive():
            try:  # noqa: SIM105  the except reads as the intent
                self.producer.stop()
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self.peer.stop()
        self.kafka.close()

    def recovery_times(self) -> None:
        """For every kill: seconds until the next commit of a txid beyond the one committed when it settled."""
        for k in self.kills:
            nxt = next((t for t, txid in self.commits if t > k.t and txid > k.baseline_txid), None)
            if nxt is not None:
                k.recovered_s = nxt - k.t
