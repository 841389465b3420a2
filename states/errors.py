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


class LeaseNotRenewedError(LeaseLostError):
    """The lease could not be renewed in time because the store did not answer (no other coordinator took it): the
    holder stops its work before the lease can expire, and may contend for it again once the store answers."""

    def __init__(self, topology_id: str, epoch: int, *, reason: str) -> None:
        super().__init__(topology_id, epoch, reason=reason)


class UnknownOutcomeError(StateError):
    """A compare-and-set's outcome could not be resolved: even the serial read kept failing."""

    def __init__(self, key: object, cause: BaseException) -> None:
        self.key, self.cause = key, cause
        super().__init__(f"outcome of the compare-and-set of key {key!r} is unknown: serial read failed ({cause!r})")


class SchemaMismatchError(StateError):
    """A table exists with a schema different from the one the configuration asks for."""

    def __init__(self, message: str) -> None:
        self.message = message  # the one field, so the error can cross Spark as data (app.failures.spark_fatal)
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


class StateTableMissingError(StateError):
    """A state table is gone though txids were committed into it (dropped, or its file replaced).

    Permanent: creating it again empty would restart every key from zero while the store says those
    txids are counted. ``committed_txid``: the pipeline's last committed txid (None: not known where
    it was seen; the commit task fills it in)."""

    def __init__(self, table: str, committed_txid: int | None = None) -> None:
        self.table, self.committed_txid = table, committed_txid
        if committed_txid == 0:  # asked by a reader, which never creates a table
            super().__init__(f"state table {table} does not exist (a pipeline's first commit creates it)")
            return
        done = "txids were" if committed_txid is None else f"txid {committed_txid} was"
        super().__init__(f"state table {table} is missing, but {done} committed into it: it is never created "
                         "again empty (every key would restart from zero); restore it, or recount with "
                         '`rewind --reset-state` (docs/operations.md, "A state table is missing")')

    def after(self, committed_txid: int) -> StateTableMissingError:
        """This error naming ``committed_txid`` as the last committed txid, unless it names one already."""
        return self if self.committed_txid is not None else StateTableMissingError(self.table, committed_txid)


class RowRefusedError(StateError):
    """The database refused a request on an existing table as invalid (Cassandra's InvalidRequest: a key
    empty or too long, a value the column cannot hold): no retry can store it. Keyed sinks leave the keys
    a backend refuses out as bad records before their commit (:mod:`states.limits`); this is the rest,
    e.g. a ``partition_persist`` updater's row."""

    def __init__(self, table: str, key: object, message: str) -> None:
        self.table, self.key, self.message = table, key, message
        of = "a row" if key is None else f"the row of key {_short(key)}"
        super().__init__(f"table {table} refused {of}: {message}")


def _short(key: object) -> str:
    text = repr(key)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


#: The state errors a coordinator must never retry: another coordinator leads, or the batch is
#: behind the state (a zombie). Replaying would only repeat them.
FATAL: tuple[type[BaseException], ...] = (LeaseLostError, LeaseHeldError, StaleBatchError, CommitProtocolError,
                                          RowRefusedError)

#: The state errors that say the configuration does not fit the store (a table of another shape, a
#: name that is no identifier, a table that vanished after txids were committed into it): permanent,
#: and reported as configuration (exit 2).
CONFIGURATION: tuple[type[BaseException], ...] = (SchemaMismatchError, InvalidIdentifierError,
                                                  StateTableMissingError)
