"""Partitioned spouts: which partitions exist (coordinator side) and what a batch of each holds (emitter side)."""

from spouts.errors import DataLossError, PartitionUnavailableError, SpoutError
from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import (
    ArrowSpout,
    DataLossPolicy,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedSpout,
    Record,
    SpoutKind,
)

__all__ = [
    "ArrowSpout",
    "BatchPlan",
    "DataLossError",
    "DataLossPolicy",
    "Partition",
    "PartitionMetadata",
    "PartitionUnavailableError",
    "PartitionedCoordinator",
    "PartitionedEmitter",
    "PartitionedSpout",
    "Record",
    "SpoutError",
    "SpoutKind",
]
