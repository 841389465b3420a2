"""Quix Streams' word count over the bench topic: the peer the product is measured against.

    .venv-peer/bin/python tests/bench/quix_peer.py BOOTSTRAP TOPIC RECORDS WORDS GUARANTEE

Runs in its own virtualenv (``make bench`` makes it: Quix Streams pins an older confluent-kafka than
the product's), against the same Kafka. Splits each sentence into words, re-keys them by word
(``group_by``, a repartition topic) and counts per word in its RocksDB state, with
``at-least-once`` or ``exactly-once`` (Kafka transactions). Prints one JSON line: records (sentences)
read, seconds from the first record processed to the end of the run (the last word counted and
the final checkpoint), records/s. Imports nothing of the product.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
import uuid
from typing import Any


def patch_admin(bootstrap: str) -> None:
    """librdkafka's mock cluster answers neither CreateTopics nor DescribeConfigs: Quix's internal topics
    (repartition, changelog) are created by the mock's auto-creation on a producer's metadata request
    (4 partitions, as the source topic), and their configs read as Quix asks for them."""
    from confluent_kafka import Producer
    from quixstreams.models.topics import admin

    def create_topics(self: Any, topics: list[Any], timeout: float = 30, finalize_timeout: float = 60) -> None:
        producer = Producer({"bootstrap.servers": bootstrap})
        for t in topics:
            producer.list_topics(t.name, timeout=timeout)
        self.wanted = {**getattr(self, "wanted", {}), **{t.name: t.create_config for t in topics}}

    def inspect_topics(self: Any, topic_names: list[str], timeout: float = 30) -> dict[str, Any]:
        cluster = self.list_topics(timeout=timeout)
        wanted = getattr(self, "wanted", {})
        out: dict[str, Any] = {}
        for name in topic_names:
            if name not in cluster:
                out[name] = None
                continue
            parts = cluster[name].partitions
            extra = {"retention.ms": "-1", "retention.bytes": "-1"}  # the mock keeps what it keeps
            if wanted.get(name) is not None:
                extra.update(wanted[name].extra_config)
            out[name] = admin.TopicConfig(num_partitions=len(parts), replication_factor=len(parts[0].replicas),
                                          extra_config=dict(extra))
        return out

    admin.TopicAdmin.create_topics = create_topics
    admin.TopicAdmin.inspect_topics = inspect_topics


def run(bootstrap: str, topic: str, records: int, words: int, guarantee: str) -> dict[str, Any]:
    from quixstreams import Application

    patch_admin(bootstrap)

    seen = {"input": 0, "words": 0}
    first: list[float] = []
    marks: dict[str, float] = {}
    done = threading.Event()
    group = f"quix-{guarantee}-{uuid.uuid4().hex[:8]}"

    def processed(name: str, partition: int, offset: int) -> None:
        if not first:
            first.append(time.perf_counter())
        if name == topic:
            seen["input"] += 1
            if seen["input"] == records:
                marks["input_read_s"] = time.perf_counter() - first[0]
        else:
            seen["words"] += 1
            if seen["words"] >= words:
                marks["counted_s"] = time.perf_counter() - first[0]
                done.set()

    with tempfile.TemporaryDirectory() as state_dir:
        app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                          processing_guarantee=guarantee, state_dir=state_dir, loglevel="WARNING",
                          on_message_processed=processed)
        source = app.topic(topic, value_deserializer="bytes", key_deserializer="bytes")
        sdf = app.dataframe(source)
        sdf = sdf.apply(lambda value: value.decode().split(), expand=True)
        sdf = sdf.group_by(lambda word: word, name="word")

        def count(word: str, state: Any) -> int:
            n = state.get("n", 0) + 1
            state.set("n", n)
            return int(n)

        sdf = sdf.apply(count, stateful=True)
        threading.Thread(target=lambda: (done.wait(), app.stop()), daemon=True).start()
        app.run()
        end = time.perf_counter()
    seconds = end - first[0] if first else float("nan")
    if seen["input"] < records or seen["words"] < words:
        raise SystemExit(f"quix {guarantee}: read {seen['input']} of {records} records, {seen['words']} of {words} words")
    return {"guarantee": guarantee, "records": seen["input"], "seconds": seconds, "rate": seen["input"] / seconds,
            **marks}


if __name__ == "__main__":
    bootstrap_servers, topic_name, n_records, n_words, mode = sys.argv[1:6]
    print(json.dumps(run(bootstrap_servers, topic_name, int(n_records), int(n_words), mode)), flush=True)
