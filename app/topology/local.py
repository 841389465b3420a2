"""An in-process batch executor: reads, transforms and aggregates in Python (tests, the memory demo).

The Spark executor does the same work on executors; this one is its reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.topology.batch import Batch, CommitStats
from spouts.protocols import PartitionedEmitter, Record
from states.aggregators import CombinerAggregator, combine_updater
from states.spec import StateKind

CHUNK = 1000  # keys per multi_update: bounds memory and request fan-out per call


def _identity(record: Record) -> Iterable[Any]:
    return (record,)


@dataclass(frozen=True)
class Sink:
    """``group_by(...).persistent_aggregate(state, aggregator)``: ``key`` None means a global aggregate.

    For ``Latest``/``First`` the ``value`` function stamps each item with its record's place:
    ``value=lambda r: Stamped.of_record(r, r.value)`` (the Spark plan carries the place itself).
    """

    state: Any  # MapState, or Snapshottable when key is None
    aggregator: CombinerAggregator
    key: Callable[[Any], tuple[Any, ...]] | None = None
    value: Callable[[Any], Any] = field(default=lambda item: item)


class LocalExecutor:
    """Runs batches in this process: ``flat_map`` turns a record into items, each sink aggregates them."""

    def __init__(self, emitter: PartitionedEmitter, sinks: Sequence[Sink],
                 flat_map: Callable[[Record], Iterable[Any]] = _identity) -> None:
        self.emitter, self.sinks, self.flat_map = emitter, list(sinks), flat_map

    def state_kinds(self) -> list[StateKind]:
        return [s.state.kind for s in self.sinks]

    def process(self, batch: Batch) -> tuple[int, list[dict[Any, Any]]]:
        partials: list[dict[Any, Any]] = [{} for _ in self.sinks]
        records = 0
        for meta in batch.plan:
            for record in self.emitter.emit_partition(meta):
                records += 1
                for item in self.flat_map(record):
                    for sink, acc in zip(self.sinks, partials, strict=True):
                        key = sink.key(item) if sink.key else None
                        v = sink.aggregator.init(sink.value(item))
                        acc[key] = sink.aggregator.combine(acc[key], v) if key in acc else v
        return records, partials

    def commit(self, batch: Batch, processed: tuple[int, list[dict[Any, Any]]]) -> CommitStats:
        records, partials = processed
        keys_updated = 0
        for sink, acc in zip(self.sinks, partials, strict=True):
            sink.state.begin_commit(batch.txid)
            if sink.key is None:
                if None in acc:
                    sink.state.update(combine_updater(sink.aggregator, acc[None]))
                    keys_updated += 1
            else:
                keys = sorted(acc)
                for i in range(0, len(keys), CHUNK):
                    chunk = keys[i:i + CHUNK]
                    sink.state.multi_update(chunk, [combine_updater(sink.aggregator, acc[k]) for k in chunk])
                keys_updated += len(keys)
            sink.state.commit(batch.txid)
        return CommitStats(records, keys_updated)

    def cancel(self, txid: int) -> None:
        """Nothing to cancel: work runs in the coordinator's own threads and is simply abandoned."""

    def close(self) -> None:
        """Nothing is held between process and commit but the result the coordinator keeps."""
