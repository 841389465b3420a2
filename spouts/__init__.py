"""Partitioned spouts: which partitions exist (coordinator side) and what a batch of each holds (emitter side)."""

from spouts.metadata import BatchPlan, Partition, PartitionMetadata
from spouts.protocols import (
    DataLossError,
    DataLossPolicy,
    PartitionedCoordinator,
    PartitionedEmitter,
    PartitionedSpout,
    PartitionUnavailableError,
    Record,
    SpoutKind,
)

__all__ = [
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
    "SpoutKind",
]
