"""Errors the service raises itself that no retry mends: each is permanent by its type, never by its text."""

from __future__ import annotations


class MissingBatchMetadataError(Exception):
    """The progress store has no plan for a txid it marks committed: the store was edited or lost rows."""

    def __init__(self, txid: int) -> None:
        self.txid = txid
        super().__init__(f"metadata of committed txid {txid} is missing from the store; the store was edited "
                         "or lost rows (restore it, or move the pipeline with `rewind`)")


class BadRecordsGoneError(Exception):
    """Bad records to dead-letter are no longer in the source (retention removed them before they were written)."""

    def __init__(self, coordinates: list[str]) -> None:
        self.coordinates = coordinates
        super().__init__(f"{len(coordinates)} bad record(s) are no longer in the source, so they cannot be "
                         f"dead-lettered (retention ran first), e.g. {coordinates[:5]}")


#: Errors of this layer a coordinator must never retry.
FATAL: tuple[type[BaseException], ...] = (MissingBatchMetadataError, BadRecordsGoneError)


class CoordinatorNotStartedError(RuntimeError):
    """A coordinator asked to step or read its progress before :meth:`start` took the lease."""

    def __init__(self, topology_id: str) -> None:
        self.topology_id = topology_id
        super().__init__(f"pipeline {topology_id}: the coordinator has not taken the lease (start() first)")
