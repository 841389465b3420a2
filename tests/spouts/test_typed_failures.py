"""``typed_read_failure``: a text-only failure is typed by reading one range of each topic on the driver.

A read that raises a spout error types the failure; one that fails untyped (a Kafka or network error) says nothing
and the next topic is asked. A failure of the process itself (MemoryError; KeyboardInterrupt and SystemExit) is no
verdict of the source on a range: it propagates, never swallowed as "untyped".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException

from spouts.errors import AccessRefusedError, PartitionUnavailableError
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import ArrowSpout
from spouts.typed_failures import typed_read_failure


class _Failing:
    """A spout whose read of each topic raises what ``raises`` names for it; records the topics read and closed."""

    def __init__(self, raises: dict[str, BaseException]) -> None:
        self.raises, self.read, self.closed = raises, list[str](), list[str]()

    def read_arrow(self, meta: PartitionMetadata, batch_size: int = 1, on_bad: Any = None,
                   columns: Any = None) -> Iterator[pa.RecordBatch]:
        self.read.append(meta.topic)
        return self._records(meta.topic)

    def _records(self, topic: str) -> Iterator[pa.RecordBatch]:
        try:
            raise self.raises[topic]
            yield  # a generator, as the Kafka spout's reads are
        finally:
            self.closed.append(topic)


def _plan(*topics: str) -> BatchPlan:
    return BatchPlan(7, {Partition(t, 0): PartitionMetadata(t, 0, 0, 5, 5, "topo") for t in topics})


def _refused() -> AccessRefusedError:
    return AccessRefusedError("authorization", "b:9092", "User:app", "the topic's Read ACL", "TOPIC_AUTHORIZATION_FAILED")


def test_an_untyped_read_failure_says_nothing_and_the_next_topic_is_asked() -> None:
    spout = _Failing({"a": KafkaException(KafkaError(KafkaError._TRANSPORT)), "b": ConnectionResetError("reset"),
                      "c": _refused()})
    typed = typed_read_failure(cast(ArrowSpout, spout), _plan("a", "b", "c"))
    assert isinstance(typed, AccessRefusedError)
    assert spout.read == spout.closed == ["a", "b", "c"]


def test_a_typed_read_failure_is_returned_at_once() -> None:
    spout = _Failing({"a": PartitionUnavailableError(Partition("a", 0), "no leader"), "b": _refused()})
    assert isinstance(typed_read_failure(cast(ArrowSpout, spout), _plan("a", "b")), PartitionUnavailableError)
    assert spout.read == ["a"]


@pytest.mark.parametrize("failure", [MemoryError("the native Kafka reader ran out of memory"), KeyboardInterrupt(),
                                     SystemExit(3)], ids=["MemoryError", "KeyboardInterrupt", "SystemExit"])
def test_a_failure_of_the_process_is_never_taken_for_an_untyped_read(failure: BaseException) -> None:
    """Before: MemoryError was swallowed as 'this read says nothing typed' and the next topic read on."""
    spout = _Failing({"a": failure, "b": _refused()})
    with pytest.raises(type(failure)):
        typed_read_failure(cast(ArrowSpout, spout), _plan("a", "b"))
    assert spout.read == spout.closed == ["a"]  # the read was closed, and no other topic was read
