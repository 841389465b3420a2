"""The chaos suite's own truth: delivery reports by coordinates, retention exclusions, the key-by-key diff."""

from __future__ import annotations

from collections import Counter

from spouts.kafka.mock_cluster import MockKafkaCluster
from tests.chaos.truth import TruthProducer, compare


def test_compare_counts_shortfalls_and_excess_key_by_key() -> None:
    truth = Counter({"a": 3, "b": 2, "c": 1})
    assert compare(truth, {"a": 3, "b": 2, "c": 1}) == (0, 0, 0)
    assert compare(truth, {"a": 1, "b": 4, "d": 1}) == (2 + 1, 2 + 1, 4)


def test_truncated_records_leave_the_truth_by_their_coordinates() -> None:
    with MockKafkaCluster(1) as kafka:
        kafka.create_topic("t", 2, 1)
        producer = TruthProducer(kafka.bootstrap_servers(), "t", 2, rate=100, seed=3)
        before = producer.truth()
        offsets = producer.burst(1, 10)
        assert offsets == list(range(10))
        assert producer.acked == 10
        all_words = producer.truth()
        kafka.delete_records("t", 1, 6)
        assert producer.truncated(1, 6) == 6
        kept = Counter(w for (p, o), ws in producer.records.items() if o >= 6 for w in ws)
        assert producer.truth() == kept
        assert before == Counter()
        assert sum(all_words.values()) > sum(kept.values())
        producer.stop()
