"""A replicated cluster on loopback for the replica lane: 3 Cassandra nodes and 3 Kafka brokers, one node at a time
killed, paused or restarted.

The servers come from a realstack folder whose ``start.sh`` knows ``CASSANDRA_NODES`` and ``KAFKA_BROKERS`` and which
has ``node.sh`` (``realstack-next``): Cassandra node i on 127.0.0.i, brokers on consecutive ports, topics with
replication factor 3 and ``min.insync.replicas=2`` by default. This module only drives it: start on free ports in a
data directory of its own, a node's faults through ``node.sh``, stop and wipe. A cluster someone already runs is
used as it is when ``REPLICA_CLUSTER_DATA`` names its ``REALSTACK_DATA`` (it is then neither started nor stopped).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realstack import beside

NODES = 3
KEYSPACE = "replicas"
DATA_CENTRE = "datacenter1"  # the kit's SimpleSnitch names its one data centre so
REPLICATION = {"class": "NetworkTopologyStrategy", DATA_CENTRE: 3}


def home() -> Path | None:
    """The realstack folder that starts a replicated cluster (``REALSTACK_DIR``, else realstack-next beside the
    clone); None when there is none."""
    named = os.environ.get("REALSTACK_DIR")
    folder = Path(named) if named else beside("realstack-next")
    return folder.resolve() if (folder / "node.sh").is_file() and (folder / "start.sh").is_file() else None


def _free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports() -> dict[str, int]:
    """Ports for a cluster whose every derived port is free: brokers P..P+2 and their controllers P+101..P+103,
    Cassandra's CQL and storage ports on 127.0.0.1-3 and its JMX ports on 127.0.0.1."""
    base = 21000 + (os.getpid() * 13) % 9000
    for step in range(300):
        kafka = 21000 + (base + step * 211) % 9000
        cql = kafka + 10
        storage, jmx = cql - 2042, cql - 1843
        wanted = [(h, p) for p in (cql, storage) for h in ("127.0.0.1", "127.0.0.2", "127.0.0.3")]
        wanted += [("127.0.0.1", p) for p in (*range(kafka, kafka + NODES), *range(kafka + 101, kafka + 101 + NODES),
                                                *range(jmx, jmx + NODES))]
        if all(_free(p, h) for h, p in wanted):
            return {"KAFKA_PORT": kafka, "CASSANDRA_PORT": cql, "CASSANDRA_STORAGE_PORT": storage,
                    "CASSANDRA_JMX_PORT": jmx}
    raise RuntimeError("no free ports for a replicated cluster")


@dataclass
class Cluster:
    """One replicated cluster: where it is, and its faults (each one logged with its time)."""

    folder: Path
    data: Path
    owned: bool  # started here: stopped and wiped by :meth:`stop`
    exports: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, what was done)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "REALSTACK_DATA": str(self.data), "STOP_WAIT": "30"}

    @property
    def bootstrap(self) -> str:
        return self.exports["KAFKA_BOOTSTRAP_SERVERS"]

    @property
    def contact_points(self) -> list[str]:
        return self.exports["CASSANDRA_CONTACT_POINTS"].split(",")

    @property
    def cql_port(self) -> int:
        return int(self.exports["CASSANDRA_PORT"])

    @classmethod
    def start(cls) -> Cluster:
        """A new cluster on free ports in a data directory of its own (minutes on two cores)."""
        folder = home()
        if folder is None:
            raise FileNotFoundError("the replica lane needs realstack-next beside the clone (or REALSTACK_DIR) "
                                    "with start.sh and node.sh")
        data = Path(tempfile.mkdtemp(prefix="replicas-"))
        data.rmdir()  # start.sh creates it and marks it as its own, so --wipe may remove it whole
        c = cls(folder, data, owned=True)
        ports = {k: str(v) for k, v in free_ports().items()}
        env = {**c.env, **ports, "CASSANDRA_NODES": str(NODES), "KAFKA_BROKERS": str(NODES),
               # LWTs and writes that meet a dead replica time out within the lane's patience
               "CASSANDRA_WRITE_TIMEOUT": os.environ.get("CASSANDRA_WRITE_TIMEOUT", "3000ms")}
        t0 = time.monotonic()
        for what in ("kafka", "cassandra"):  # no registry: the lane's records are plain text
            out = subprocess.run([str(folder / "start.sh"), what, "--env"], env=env, stdout=subprocess.PIPE,
                                 stderr=sys.stderr, text=True, check=False, timeout=1200)
            c.exports.update(re.findall(r"(\w+)=(\S+)", out.stdout))
            if out.returncode != 0:
                c.stop()
                raise RuntimeError(f"start.sh {what} failed with {out.returncode} (logs in {data}/logs)")
        c.exports = {k: v.strip('"') for k, v in c.exports.items()}
        print(f"replicas: cluster up in {time.monotonic() - t0:.0f} s: {c.bootstrap} / {c.contact_points}:"
              f"{c.cql_port}", file=sys.stderr, flush=True)
        return c

    @classmethod
    def running(cls, data: Path) -> Cluster:
        """The cluster someone runs with ``REALSTACK_DATA`` = ``data``; its addresses from the variables its
        ``start.sh --env`` printed (``KAFKA_BOOTSTRAP_SERVERS``, ``CASSANDRA_CONTACT_POINTS``, ``CASSANDRA_PORT``)."""
        folder = home()
        if folder is None:
            raise FileNotFoundError("realstack-next (node.sh) not found")
        names = ("KAFKA_BOOTSTRAP_SERVERS", "CASSANDRA_CONTACT_POINTS", "CASSANDRA_PORT")
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise RuntimeError(f"REPLICA_CLUSTER_DATA names a running cluster: export {', '.join(missing)} too")
        return cls(folder, data.resolve(), owned=False, exports={n: os.environ[n] for n in names})

    def stop(self) -> None:
        if self.owned:
            subprocess.run([str(self.folder / "stop.sh"), "all", "--wipe"], env=self.env, stdout=sys.stderr,
                           stderr=sys.stderr, check=False, timeout=600)

    # -- faults ----------------------------------------------------------------------------------

    def node(self, action: str, server: str, n: int) -> float:
        """``node.sh ACTION SERVER N`` (kill, stop, start, pause, resume); seconds it took. A start that did not
        bring the node up fails the test."""
        t0 = time.monotonic()
        self.events.append((t0, f"{action} {server} {n}"))
        out = subprocess.run([str(self.folder / "node.sh"), action, server, str(n)], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=900)
        if out.returncode != 0 and action != "state":
            raise RuntimeError(f"node.sh {action} {server} {n} failed ({out.returncode}): {out.stdout[-600:]}")
        return time.monotonic() - t0

    def state(self, server: str, n: int) -> str:
        out = subprocess.run([str(self.folder / "node.sh"), "state", server, str(n)], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False, timeout=60)
        return out.stdout.strip()

    def heal(self) -> None:
        """Every node up again (a paused one resumed, a stopped one started), as the end of a scenario needs."""
        for server in ("kafka", "cassandra"):
            for n in range(1, NODES + 1):
                s = self.state(server, n)
                if s == "PAUSED":
                    self.node("resume", server, n)
                elif s != "UP":
                    self.node("start", server, n)

    # -- reading, for the harness ------------------------------------------------------------------

    def session(self) -> Any:
        """A driver session of the harness (QUORUM reads, generous timeouts), to compare with the truth."""
        from cassandra import ConsistencyLevel
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import ConstantReconnectionPolicy, DCAwareRoundRobinPolicy
        from cassandra.query import dict_factory

        profile = ExecutionProfile(load_balancing_policy=DCAwareRoundRobinPolicy(DATA_CENTRE),
                                   consistency_level=ConsistencyLevel.QUORUM,
                                   serial_consistency_level=ConsistencyLevel.SERIAL, request_timeout=30,
                                   row_factory=dict_factory)
        cluster = Cluster(self.contact_points, port=self.cql_port, connect_timeout=10,
                          execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                          reconnection_policy=ConstantReconnectionPolicy(1.0))
        return cluster.connect()

    def create_topic(self, name: str, partitions: int) -> None:
        """A topic of replication factor 3 and ``min.insync.replicas=2`` (the kit's defaults, written out)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, partitions, NODES, config={"min.insync.replicas": "2"})
        for f in admin.create_topics([topic], request_timeout=60).values():
            f.result()

    def leader(self, topic: str, partition: int = 0) -> int:
        """The broker number (1-3) that leads ``topic``'s ``partition`` now."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        md = admin.list_topics(topic, timeout=30)
        leader_id = md.topics[topic].partitions[partition].leader
        port = int(md.brokers[leader_id].port)
        first = int(self.bootstrap.split(",")[0].rsplit(":", 1)[1])
        return port - first + 1
