"""The real-server lane: the service against real Apache Kafka, Cassandra and a Schema Registry whose
processes are SIGKILLed and restarted under it.

The lane starts its own instance of the servers (tests/realstack.py: free ports, its own data directory,
wiped at the end), so killing them disturbs nothing else. Its pipeline reads Confluent-framed JSON sales
through the registry (``json_schema``), sums and counts them per user into Cassandra, and dead-letters
malformed records. The producer writes in transactions and aborts some of them on purpose (and any that a
broker kill makes abortable): records of aborted transactions are in the log but never in the truth, which
the mock cluster cannot serve. Faults, on a seeded schedule:

* service instances (an active one and its standby) SIGKILLed at random moments of their running and as
  soon as the txid after the committed one is seen frozen (a commit in flight), now and then in start-up;
  a third one SIGKILLed in start-up again and again while the run is behind its kill budget;
* the Cassandra process SIGKILLed while a txid is frozen and not yet marked (its commit log replayed at the
  restart), the Kafka broker SIGKILLed while the spout reads and the dead-letter producer writes, and the
  registry restarted; each server started again after 0-8 s.

Ground truth comes from the producer's delivery reports and its committed transactions only.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.chaos.bad_records import KEYLESS_EVERY, TABLE, TRANSFORM_EVERY, BadRecordsLane, SalesProducer
from tests.chaos.cqlpeer import StoreDocuments
from tests.chaos.lane import PIPELINE, Lane, frozen_txids
from tests.chaos.scenarios import Budget, exited, find_active, start_turns, start_up_delay, wait_commit, wait_role
from tests.chaos.truth import VOCABULARY
from tests.realstack import RealStack, find
from tests.service.helpers import ServiceProcess

SUBJECT = "sales-value"
SHARDS = 4  # the lane's table is sharded (cassandra.shards)
SALE_SCHEMA = json.dumps({"type": "object", "additionalProperties": False,
                          "properties": {"user": {"type": "string"}, "amount": {"type": "integer"}}})
UNKNOWN_SCHEMA_ID = 987_654


def _framed(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


#: Malformed kinds of the registry-framed sales -> a function of (rng, schema id) giving the value.
#: DECODE kinds fail the framing or the decoding; KEYLESS ones decode with a null group-by key; TRANSFORM ones
#: make the pipeline's transform fail (``bad_records.AMOUNT``).
DECODE: dict[str, Any] = {
    "unframed JSON": lambda rng, sid: json.dumps({"user": rng.choice(VOCABULARY), "amount": 1}).encode(),
    "random bytes": lambda rng, sid: b"\x01" + bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))),
    "empty value": lambda rng, sid: b"",
    "unknown schema id": lambda rng, sid: _framed(UNKNOWN_SCHEMA_ID, b'{"user": "k01", "amount": 1}'),
    "framed truncated JSON": lambda rng, sid: _framed(sid, b'{"user": "k01", "amo'),
    "framed JSON array": lambda rng, sid: _framed(sid, b"[1, 2, 3]"),
    "amount not a number": lambda rng, sid: _framed(sid, json.dumps({"user": "k02", "amount": "lots"}).encode()),
    "user not a string": lambda rng, sid: _framed(sid, json.dumps({"user": {"n": [1]}, "amount": 1}).encode()),
}
KEYLESS: dict[str, Any] = {
    "no user": lambda rng, sid: _framed(sid, json.dumps({"amount": rng.randint(1, 9)}).encode()),
    "user null": lambda rng, sid: _framed(sid, json.dumps({"user": None, "amount": 2}).encode()),
    "no value": lambda rng, sid: None,
}
TRANSFORM: dict[str, Any] = {
    "amount zero (division by zero)": lambda rng, sid: _framed(sid, json.dumps({"user": "k03", "amount": 0}).encode()),
    "amount negative (raise_error)": lambda rng, sid: _framed(sid, json.dumps({"user": "k04", "amount": -3}).encode()),
}


class RegistrySalesProducer(SalesProducer):
    """Sales framed with the registered schema's id; malformed ones of the kinds above, in transactions."""

    def __init__(self, *args: Any, registry_url: str, **kwargs: Any) -> None:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        super().__init__(*args, **kwargs)
        self.decode_kinds = list(DECODE)
        client = SchemaRegistryClient({"url": registry_url})
        self.schema_id = client.register_schema(SUBJECT, Schema(SALE_SCHEMA, "JSON"))

    def _produce(self, partition: int, sink: Any) -> None:
        n, more = self.sent, len(self.bad) < self.malformed_target
        if more and n % KEYLESS_EVERY == KEYLESS_EVERY - 1:
            kind = list(KEYLESS)[(n // KEYLESS_EVERY) % len(KEYLESS)]
            value = KEYLESS[kind](self.rng, self.schema_id)
        elif more and n % TRANSFORM_EVERY == TRANSFORM_EVERY - 3:
            kind = list(TRANSFORM)[(n // TRANSFORM_EVERY) % len(TRANSFORM)]
            value = TRANSFORM[kind](self.rng, self.schema_id)
        elif more and n % self.bad_every == 0:
            kind = self.decode_kinds[(n // self.bad_every) % len(self.decode_kinds)]
            value = DECODE[kind](self.rng, self.schema_id)
        else:
            kind = ""
        good = None if kind else (self.rng.choice(VOCABULARY), self.rng.randint(1, 99))
        if good is not None:
            value = _framed(self.schema_id, json.dumps({"user": good[0], "amount": good[1]}).encode())
        self._producer.produce(self.topic, value, partition=partition,
                               on_delivery=lambda err, msg, payload=(kind, good): sink(err, msg, payload))  # type: ignore[misc]  # defaults bind this call's values
        self.sent += 1


class RealKafka:
    """The lane's real Kafka broker, administered through the Admin API (one broker: replication 1)."""

    broker_ids: tuple[int, ...] = ()  # no broker is taken down by the mock's control API here

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self._bootstrap = bootstrap
        self._admin = AdminClient({"bootstrap.servers": bootstrap})

    def bootstrap_servers(self) -> str:
        return self._bootstrap

    def create_topic(self, name: str, partitions: int, replication: int = 1) -> None:
        from confluent_kafka.admin import NewTopic

        for f in self._admin.create_topics([NewTopic(name, partitions, 1)], request_timeout=60).values():
            f.result()

    def broker_up(self, broker: int) -> None:
        pass

    def close(self) -> None:
        pass


class _NoControl:
    """A real node has no fault-injection port: clearing faults is a no-op."""

    def clear(self) -> bool:
        return True


class RealCassandra(StoreDocuments):
    """Reads of the lane's real Cassandra node for the harness (its own driver session, reconnecting)."""

    rpc = _NoControl()

    def __init__(self, port: int) -> None:
        self.port = port
        self._cluster: Any = None
        self._session: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        from cassandra.cluster import Cluster
        from cassandra.policies import ConstantReconnectionPolicy
        from cassandra.query import dict_factory

        with self._lock:
            if self._session is None:
                self._cluster = Cluster(["127.0.0.1"], port=self.port, connect_timeout=10,
                                        reconnection_policy=ConstantReconnectionPolicy(1.0))
                self._session = self._cluster.connect()
                self._session.row_factory = dict_factory
                self._session.default_timeout = 30
            return self._session

    def rows(self, table: str, keyspace: str = "trident", patience_s: float = 300.0) -> list[dict[str, Any]]:
        """Every row of ``table``; while the node is down or restarting (the lane kills it) the read is retried
        for up to ``patience_s``, so the harness outlasts the faults it injects."""
        from cassandra import DriverException, InvalidRequest, RequestExecutionException
        from cassandra.cluster import NoHostAvailable

        deadline = time.monotonic() + patience_s
        while True:
            try:
                return list(self._connect().execute(f"SELECT * FROM {keyspace}.{table}"))
            except InvalidRequest:  # no keyspace or table yet
                return []
            except (NoHostAvailable, DriverException, RequestExecutionException, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()


class RealServersLane(BadRecordsLane):
    """Registry-framed JSON sales with dead letters, on a realstack instance of its own."""

    def __init__(self, name: str, seed: int, workdir: Path, **options: Any) -> None:
        home = find()
        if home is None:
            raise RuntimeError("the real lane needs a realstack folder (REALSTACK_DIR)")
        self.stack = RealStack(home, workdir / name / "realstack")
        (workdir / name).mkdir(parents=True, exist_ok=True)
        self.exports = self.stack.start()
        self.process_faults: Counter[str] = Counter()
        try:
            super().__init__(name, seed, workdir, **options)
            self.producer = RegistrySalesProducer(
                self.kafka.bootstrap_servers(), self.topic, self.partitions, rate=options.get("rate", 80.0), seed=seed,
                malformed=self.malformed, transactional_id=f"{name}-producer", abort_ratio=0.1,
                registry_url=self.exports["SCHEMA_REGISTRY_URL"])
        except BaseException:
            self.stack.stop()
            raise

    def start_kafka(self) -> RealKafka:
        return RealKafka(self.exports["KAFKA_BOOTSTRAP_SERVERS"])

    def start_cassandra(self) -> RealCassandra:
        return RealCassandra(int(self.exports["CASSANDRA_PORT"]))

    def _service(self, i: int, data_loss: str) -> ServiceProcess:
        service = super()._service(i, data_loss)
        import yaml

        doc = yaml.safe_load(service.config.read_text())
        doc["kafka"]["schema_registry"] = {"url": self.exports["SCHEMA_REGISTRY_URL"], "timeout_s": 5}
        p = doc["pipelines"][0]
        p["spout"]["value_format"] = {"type": "json_schema", "subject": SUBJECT}
        p["lease_ttl_s"] = self.lease_ttl_s
        doc["cassandra"]["request_timeout_s"] = 10
        # a sharded table: its commits are conditional batches under real Paxos and Cassandra kills (the lanes on
        # the CQL test server keep a partition per key)
        doc["cassandra"]["shards"] = SHARDS
        service.config.write_text(yaml.safe_dump(doc, sort_keys=False))
        return service

    def drain_and_verify(self, stall_s: float = 300.0, limit_s: float = 1800.0) -> Any:
        self.stack.start()  # every server up for the drain (a running one is left alone)
        o = super().drain_and_verify(stall_s, limit_s)
        shards = {r.get("shard") for r in self.peer.rows(TABLE)}
        if None in shards or not shards <= set(range(SHARDS)):  # the rows must be where a sharded table keeps them
            o.passed, o.error = False, f"table {TABLE} is not in {SHARDS} shards: {sorted(map(str, shards))}"
        o.notes.insert(0, f"table {TABLE} in {SHARDS} shards, {len(shards)} holding rows")
        producer = self.producer
        o.notes.append(f"{producer.transactions} transactions committed, {producer.aborted} aborted; process kills: "
                       + ", ".join(f"{k} {n}" for k, n in sorted(self.process_faults.items())))
        return o

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.stack.stop(wipe=True)


def kill_server(lane: RealServersLane, server: str, rng: random.Random, detail: str) -> None:
    """SIGKILL ``server``'s process, wait 0-8 s, start it again; recorded as a fault with its restart time."""
    t0 = time.monotonic()
    if not lane.stack.kill(server):
        lane.say(f"{server} was not running")
    down = rng.uniform(0.0, 8.0)
    time.sleep(down)
    took = lane.stack.restart(server)
    lane.process_faults[server] += 1
    lane.faults.append(_event(t0, f"{server} SIGKILL", f"{detail}; down {down:.1f} s, ready {took:.1f} s after restart"))
    lane.say(f"{server} SIGKILLed ({detail}), restarted in {took:.1f} s")


def _event(t0: float, kind: str, detail: str) -> Any:
    from tests.chaos.lane import FaultEvent

    return FaultEvent(t0, time.monotonic(), kind, detail)


def commit_in_flight(lane: Lane, timeout: float) -> bool:
    """Wait until the txid after the committed one is frozen (its state writes may be under way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            docs = lane.peer.documents(PIPELINE)
            marker = docs.get("coordinator")
            committed = 0 if marker is None else int(json.loads(marker)["committed_txid"])
            if committed + 1 in frozen_txids(docs):
                return True
        except Exception:  # noqa: BLE001 - the node is restarting: look again
            pass
        time.sleep(0.05)
    return False


def server_faults(lane: Lane, rng: random.Random, stop: threading.Event) -> None:
    """Every 25-55 s, in turn: Cassandra SIGKILLed with a commit in flight, the Kafka broker SIGKILLed while
    records flow, the registry SIGKILLed; each restarted."""
    assert isinstance(lane, RealServersLane)
    order = ("cassandra", "kafka", "registry")
    i = 0
    while not stop.wait(rng.uniform(25.0, 55.0)):
        server = order[i % len(order)]
        i += 1
        if server == "cassandra":
            in_flight = commit_in_flight(lane, 60.0)
            kill_server(lane, server, rng, "a txid frozen and not yet marked" if in_flight else "no txid in flight seen")
        elif server == "kafka":
            kill_server(lane, server, rng, "while the spout reads and the producer writes")
        else:
            kill_server(lane, server, rng, "registry")


def real_servers(lane: Lane, budget: Budget) -> None:
    """Two instances (active and standby) SIGKILLed at random moments and with a commit in flight, now and
    then the standby in start-up, and a third SIGKILLed in start-up while the run is behind its kill budget,
    while a helper thread SIGKILLs and restarts Cassandra, Kafka and the registry."""
    assert isinstance(lane, RealServersLane)
    rng = lane.rng
    stop = threading.Event()
    pair, helpers = start_turns(lane, budget, server_faults, stop)
    try:
        while budget.more() or len(lane.producer.bad) < lane.malformed:  # type: ignore[attr-defined]
            if not budget.more() and time.monotonic() > budget.deadline + 600:
                break
            active = find_active(lane, among=pair, timeout=120.0)
            if active is None:
                continue
            standby = next(s for s in pair if s is not active)
            roll = rng.random()
            if roll < 0.15:  # the standby in start-up
                if not exited(lane, standby, "as a standby"):
                    lane.kill(standby, "standby", interrupts=False)
                standby.start()
                time.sleep(start_up_delay(rng))
                if not exited(lane, standby, "in start-up"):
                    lane.kill(standby, "start-up", interrupts=False)
                standby.start()
                continue
            wait_role(lane, standby, "standby", timeout=120.0)
            if not wait_commit(active, timeout=180.0):
                exited(lane, active, "before its first commit")
                continue
            if roll < 0.55:
                aimed = "commit in flight" if commit_in_flight(lane, 30.0) else "running (no commit in flight seen)"
            else:
                time.sleep(rng.uniform(0.0, 15.0))
                aimed = "running"
            if not exited(lane, active, f"while aiming a kill at {aimed}"):
                lane.kill(active, aimed)
            active.start()  # back as the standby
    finally:
        stop.set()
        for t in helpers:
            t.join()


SCENARIO = (real_servers, {"instances": 3, "lease_ttl_s": 10.0, "rate": 60.0, "caps": (400, 1200),
                           "transactional": True},
            ("real Apache Kafka 3.3, Cassandra 4.0 and a Schema Registry (Karapace) in processes of their own: "
            "registry-framed JSON sales (json_schema) with malformed records of thirteen kinds (unframed, unknown "
            "schema id, bad JSON, wrong types; null keys one in 100, transform errors one in 1,000) dead-lettered; the producer in transactions, "
            "10% aborted on purpose; an active instance and its standby SIGKILLed at random moments and with a "
            "commit in flight, now and then in start-up, a third instance SIGKILLed in start-up while the run is "
            "behind its kill budget; every 25-55 s in turn Cassandra SIGKILLed with a txid "
            "frozen and not marked (commit log replayed on restart), the Kafka broker SIGKILLed while records "
            "flow, the registry SIGKILLed; each restarted after 0-8 s"))
