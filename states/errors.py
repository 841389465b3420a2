"""Errors raised by states and transactional-state stores; each carries the data that explains it."""

from __future__ import annotations


class StateError(Exception):
    """Base of every state error."""


class StaleBatchError(StateError):
    """A batch is behind the state: the stored txid is newer than the batch's, so it must not write."""

    def __init__(self, batch_txid: int, stored_txid: int, key: object = None) -> None:
        self.batch_txid, self.stored_txid, self.key = batch_txid, stored_txid, key
        super().__init__(
            f"batch txid {batch_txid} is behind the state (stored txid {stored_txid}"
            + (f", key {key!r})" if key is not None else ")")
        )


class CasRetriesExhaustedError(StateError):
    """Compare-and-set kept failing for some keys after the allowed number of attempts."""

    def __init__(self, keys: list[object], attempts: int) -> None:
        self.keys, self.attempts = keys, attempts
        super().__init__(f"compare-and-set failed {attempts} times for {len(keys)} key(s), e.g. {keys[:3]!r}")


class LeaseHeldError(StateError):
    """Another coordinator holds the topology's lease."""

    def __init__(self, topology_id: str, owner: str, epoch: int) -> None:
        self.topology_id, self.owner, self.epoch = topology_id, owner, epoch
        super().__init__(f"topology {topology_id!r} is led by {owner!r} (epoch {epoch})")


class LeaseLostError(StateError):
    """This coordinator no longer holds the topology's lease: a newer coordinator took over, it
    expired before it was renewed, or it could not be renewed in time (``reason``)."""

    def __init__(self, topology_id: str, epoch: int, current_epoch: int | None = None, *,
                 reason: str | None = None) -> None:
        self.topology_id, self.epoch, self.current_epoch = topology_id, epoch, current_epoch
        if reason is None:
            if current_epoch is None:
                reason = "it is no longer current"
            elif current_epoch == epoch:
                reason = "it expired before it was renewed"
            else:
                reason = f"a newer coordinator took over (epoch {current_epoch})"
        self.reason = reason
        super().__init__(f"lease of topology {topology_id!r} (epoch {epoch}) lost: {reason}")


class UnknownOutcomeError(StateError):
    """A compare-and-set's outcome could not be resolved: even the serial read kept failing."""

    def __init__(self, key: object, cause: BaseException) -> None:
        self.key, self.cause = key, cause
        super().__init__(f"outcome of the compare-and-set of key {key!r} is unknown: serial read failed ({cause!r})")


class SchemaMismatchError(StateError):
    """A table exists with a schema different from the one the configuration asks for."""

    def __init__(self, message: str) -> None:
        self.message = message  # the one field, so the error can cross Spark as data (app.spark.fatal)
        super().__init__(message)


class InvalidIdentifierError(StateError, ValueError):
    """A table, keyspace or column name from configuration is not a safe identifier."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class CommitProtocolError(StateError):
    """A map state written outside ``begin_commit``/``commit``: a bug of its caller, which no retry mends."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


#: The state errors a coordinator must never retry: another coordinator leads, or the batch is
#: behind the state (a zombie). Replaying would only repeat them.
FATAL: tuple[type[BaseException], ...] = (LeaseLostError, LeaseHeldError, StaleBatchError, CommitProtocolError)

#: The state errors that say the configuration does not fit the store (a table of another shape, a
#: name that is no identifier): permanent, and reported as configuration (exit 2).
CONFIGURATION: tuple[type[BaseException], ...] = (SchemaMismatchError, InvalidIdentifierError)
