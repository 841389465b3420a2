"""Kafka and Cassandra for the pods: a private realstack instance that pods and host clients both reach.

Kafka listens on all addresses and advertises the node IP (pods follow the advertised listener); Cassandra
stays on loopback behind a realk8s forwarder on the node IP. The stored state is read from the host: the
SQLite file on the pod's volume (a host directory), or Cassandra directly.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from tests import realstack
from tests.k8s.kit import Cluster


@dataclass
class PodPeers:
    """Addresses of the servers: ``kafka`` for pods and host clients alike, Cassandra for pods and for the host."""

    stack: realstack.RealStack
    kafka: str
    cassandra_node: str
    cassandra_port: int

    def create_topic(self, topic: str, partitions: int) -> None:
        admin = AdminClient({"bootstrap.servers": self.kafka})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(60)

    def topics(self) -> set[str]:
        admin = AdminClient({"bootstrap.servers": self.kafka})
        return set(admin.list_topics(timeout=30).topics)

    def cassandra_values(self, keyspace: str) -> dict[str, Any]:
        return {"contact_points": [self.cassandra_node], "port": self.cassandra_port, "keyspace": keyspace}

    def cassandra_counts(self, keyspace: str, table: str) -> dict[str, int]:
        """``word -> count`` of a Cassandra table, read from the host (empty while the table does not exist)."""
        from cassandra import InvalidRequest
        from cassandra.cluster import Cluster as CqlCluster

        cluster = CqlCluster(["127.0.0.1"], port=self.cassandra_port, connect_timeout=20)
        try:
            session = cluster.connect()
            try:
                return {r.word: int(r.count) for r in session.execute(f"SELECT word, count FROM {keyspace}.{table}")}
            except InvalidRequest:
                return {}
        finally:
            cluster.shutdown()


def sqlite_counts(db: Path, table: str) -> dict[str, int]:
    """``word -> count`` of a SQLite table on a pod's volume (empty while it does not exist)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return {w: int(n) for w, n in conn.execute(f"SELECT word, count FROM {table}")}
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


@contextmanager
def pod_peers(cluster: Cluster) -> Iterator[PodPeers]:
    """A private Kafka and Cassandra the cluster's pods reach; stopped and wiped afterwards."""
    home = realstack.find()
    if home is None:
        raise FileNotFoundError("no realstack folder beside the clone (shared/realstack-next or shared/realstack); "
                                "set REALSTACK_DIR")
    data = Path(tempfile.mkdtemp(prefix="realstack-k8s-"))
    shutil.rmtree(data)  # start.sh creates it and marks it as its own
    ports = realstack.free_ports()
    kport = ports["KAFKA_PORT"]
    extra = {"KAFKA_EXTRA_CONFIG": f"listeners=PLAINTEXT://0.0.0.0:{kport},CONTROLLER://127.0.0.1:{kport + 1}\n"
                                   f"advertised.listeners=PLAINTEXT://{cluster.node_ip}:{kport}"}
    stack = realstack.RealStack(home, data, ports, extra_env=extra)
    try:
        stack.start("kafka")
        stack.start("cassandra")
        node, _, port = cluster.expose(ports["CASSANDRA_PORT"]).rpartition(":")
        yield PodPeers(stack, f"{cluster.node_ip}:{kport}", node, int(port))
    finally:
        with suppress(RuntimeError):
            cluster.unexpose(ports["CASSANDRA_PORT"])
        stack.stop(wipe=True)
