"""librdkafka's mock Kafka cluster, driven through ``ctypes`` from the library inside the confluent-kafka wheel.

The mock speaks the real Kafka protocol on loopback (any process can connect to its brokers) and
offers failure control: brokers down/up, leader moves, request errors, retention. Signatures follow
``src/rdkafka_mock.h`` of librdkafka (an experimental API without ABI guarantees).

It lives in the product (not under ``tests/``) because ``python -m app demo`` runs on it; the
tests use it from here too.

Known gaps of the mock, checked by ``tests/kafka/test_mock_cluster.py`` so a librdkafka upgrade that fixes them
is noticed: Fetch always reports LastStableOffset = high watermark and no aborted transactions (a
``read_committed`` consumer sees aborted and open-transaction records); ListOffsets by timestamp
answers -1; no CreateTopics/CreatePartitions/DeleteRecords admin requests (hence the control calls). Its
metadata names no live controller, so every admin request waits for one until it times out, and topic ids
(DescribeTopics) are unknown there, unless :meth:`MockKafkaCluster.set_controller` names a broker: then
DescribeTopics answers, with a new id for a re-created topic.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Self

import confluent_kafka
from confluent_kafka import Consumer

__all__ = ["MockClusterError", "MockKafkaCluster", "librdkafka_path"]

_RK_PRODUCER = 0


def librdkafka_path() -> str:
    """The librdkafka shared library bundled with confluent-kafka (the one its C extension uses)."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        msg = f"no bundled librdkafka under {libs}"
        raise RuntimeError(msg)
    return str(found[0])


def _load() -> ctypes.CDLL:
    lib = ctypes.CDLL(librdkafka_path())
    vp, cp, i16, i32, i64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64
    sigs: dict[str, tuple[object, list[object]]] = {
        "rd_kafka_conf_new": (vp, []),
        "rd_kafka_conf_set": (ctypes.c_int, [vp, cp, cp, cp, ctypes.c_size_t]),
        "rd_kafka_new": (vp, [ctypes.c_int, vp, cp, ctypes.c_size_t]),
        "rd_kafka_destroy": (None, [vp]),
        "rd_kafka_err2str": (cp, [ctypes.c_int]),
        "rd_kafka_mock_cluster_new": (vp, [vp, ctypes.c_int]),
        "rd_kafka_mock_cluster_destroy": (None, [vp]),
        "rd_kafka_mock_cluster_bootstraps": (cp, [vp]),
        "rd_kafka_mock_topic_create": (ctypes.c_int, [vp, cp, ctypes.c_int, ctypes.c_int]),
        "rd_kafka_mock_topic_delete": (ctypes.c_int, [vp, cp]),
        "rd_kafka_mock_broker_set_down": (ctypes.c_int, [vp, i32]),
        "rd_kafka_mock_broker_set_up": (ctypes.c_int, [vp, i32]),
        "rd_kafka_mock_partition_set_leader": (ctypes.c_int, [vp, cp, i32, i32]),
        "rd_kafka_mock_push_request_errors_array": (None, [vp, i16, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int)]),
        "rd_kafka_mock_partition_delete_records": (ctypes.c_int, [vp, cp, i32, i64]),
        "rd_kafka_mock_set_controller_id": (ctypes.c_int, [vp, i32]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


class MockClusterError(RuntimeError):
    """A mock control call returned a Kafka error code."""


class MockKafkaCluster:
    """A mock cluster of ``brokers`` brokers (ids 1..n) on loopback, owned by its own ``rd_kafka_t`` handle."""

    kind = "mock"

    def __init__(self, brokers: int = 3) -> None:
        self._lib = lib = _load()
        conf = lib.rd_kafka_conf_new()
        errstr = ctypes.create_string_buffer(512)
        for key, value in ((b"log_level", b"3"), (b"bootstrap.servers", b"")):
            lib.rd_kafka_conf_set(conf, key, value, errstr, len(errstr))
        self._rk = lib.rd_kafka_new(_RK_PRODUCER, conf, errstr, len(errstr))
        if not self._rk:
            msg = f"rd_kafka_new failed: {errstr.value.decode()}"
            raise MockClusterError(msg)
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._mc:
            lib.rd_kafka_destroy(self._rk)
            msg = "rd_kafka_mock_cluster_new failed"
            raise MockClusterError(msg)
        self.broker_ids = tuple(range(1, brokers + 1))
        self._bootstrap: str = lib.rd_kafka_mock_cluster_bootstraps(self._mc).decode()

    # -- the peer interface (shared with real Kafka peers) ------------------------------------

    def bootstrap_servers(self) -> str:
        return self._bootstrap

    def create_topic(self, name: str, partitions: int, replication: int = 3) -> None:
        self._check(self._lib.rd_kafka_mock_topic_create(self._mc, name.encode(), partitions, replication),
                    f"create topic {name}")

    def delete_topic(self, name: str) -> None:
        self._check(self._lib.rd_kafka_mock_topic_delete(self._mc, name.encode()), f"delete topic {name}")

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Retention: offsets below ``before_offset`` are gone; the log start moves there."""
        self._check(self._lib.rd_kafka_mock_partition_delete_records(self._mc, topic.encode(), partition, before_offset),
                    f"delete records of {topic}:{partition} before {before_offset}")

    # -- failure control (mock only) ----------------------------------------------------------

    def broker_down(self, broker_id: int) -> None:
        """Disconnect the broker and refuse connections (its partitions keep it as leader)."""
        self._check(self._lib.rd_kafka_mock_broker_set_down(self._mc, broker_id), f"broker {broker_id} down")

    def broker_up(self, broker_id: int) -> None:
        self._check(self._lib.rd_kafka_mock_broker_set_up(self._mc, broker_id), f"broker {broker_id} up")

    def set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the partition's leadership to ``broker_id`` (-1: no leader)."""
        self._check(self._lib.rd_kafka_mock_partition_set_leader(self._mc, topic.encode(), partition, broker_id),
                    f"set leader of {topic}:{partition} to {broker_id}")

    def set_controller(self, broker_id: int) -> None:
        """Name ``broker_id`` as the controller in metadata, so that DescribeTopics (topic ids) is answered."""
        self._check(self._lib.rd_kafka_mock_set_controller_id(self._mc, broker_id), f"controller {broker_id}")

    def push_request_errors(self, api_key: int, *errors: int) -> None:
        """The next ``len(errors)`` requests of ``api_key`` (e.g. 2 = ListOffsets) fail with these codes, in order."""
        arr = (ctypes.c_int * len(errors))(*errors)
        self._lib.rd_kafka_mock_push_request_errors_array(self._mc, api_key, len(errors), arr)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader broker id, from cluster metadata."""
        c = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "mock-metadata"})
        try:
            md = c.list_topics(topic, timeout=10)
            return {p: m.leader for p, m in sorted(md.topics[topic].partitions.items())}
        finally:
            c.close()

    def close(self) -> None:
        if self._mc:
            self._lib.rd_kafka_mock_cluster_destroy(self._mc)
            self._lib.rd_kafka_destroy(self._rk)
            self._mc = self._rk = None

    def _check(self, err: int, what: str) -> None:
        if err:
            msg = f"{what}: {self._lib.rd_kafka_err2str(err).decode()} ({err})"
            raise MockClusterError(msg)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

