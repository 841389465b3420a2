"""Errors raised by spouts, under one base; each carries the partition and offsets that explain it."""

from __future__ import annotations

from spouts.metadata import Partition


class SpoutError(Exception):
    """Base of every spout error."""


class PartitionUnavailableError(SpoutError):
    """A partition cannot be read now (no leader, broker down); the batch retries later."""

    def __init__(self, partition: Partition, reason: str = "") -> None:
        self.partition, self.reason = partition, reason
        super().__init__(f"partition {partition.id} unavailable" + (f": {reason}" if reason else ""))


class SourceUnavailableError(SpoutError):
    """The source's cluster cannot be reached or asked (names the servers tried); the batch retries later."""

    def __init__(self, servers: str, reason: str) -> None:
        self.servers, self.reason = servers, reason
        super().__init__(f"cannot reach the source at {servers}: {reason}")


class AccessRefusedError(SpoutError):
    """The source's cluster refused this client for good: its credentials (``authentication``), its rights
    (``authorization``) or the trust of the server's certificate (``TLS``). A retry cannot mend it.

    ``principal`` is the user name the client presented (never a secret), ``setting`` what to check.
    """

    def __init__(self, kind: str, servers: str, principal: str, setting: str, detail: str) -> None:
        self.kind, self.servers, self.principal, self.setting, self.detail = kind, servers, principal, setting, detail
        super().__init__(f"{kind} refused by Kafka at {servers} for principal {principal}: {detail}; check {setting}")

    def __reduce__(self) -> tuple[object, ...]:
        return (AccessRefusedError, (self.kind, self.servers, self.principal, self.setting, self.detail))


class DataLossError(SpoutError):
    """Offsets the pipeline has not read are gone from the log (policy ``fail``)."""

    def __init__(self, partition: Partition, next_offset: int, log_start: int) -> None:
        self.partition, self.next_offset, self.log_start = partition, next_offset, log_start
        super().__init__(
            f"data loss on {partition.id}: next offset to read is {next_offset} but the log starts at "
            f"{log_start} ({log_start - next_offset} offsets gone); set data_loss: skip to continue from the log start"
        )


class LogRestartedError(DataLossError):
    """A partition's log now ends below the position the pipeline stored for it: the topic was deleted and
    re-created, or its log truncated (policy ``fail``). What the old log held past that position is gone."""

    def __init__(self, partition: Partition, next_offset: int, log_start: int, log_end: int) -> None:
        self.partition, self.next_offset, self.log_start, self.log_end = partition, next_offset, log_start, log_end
        SpoutError.__init__(
            self, f"data loss on {partition.id}: the stored next offset is {next_offset} but the log ends at "
                  f"{log_end} (topic re-created or log truncated; it starts at {log_start}); set data_loss: skip to "
                  f"continue from the new log's start, or rewind the pipeline")

    def __reduce__(self) -> tuple[object, ...]:
        return (LogRestartedError, (self.partition, self.next_offset, self.log_start, self.log_end))


class TopicRecreatedError(LogRestartedError):
    """A partition's topic now has another id than the one stored with the position: the topic was deleted and
    re-created, whatever the new log's offsets (policy ``fail``). The stored position belongs to the old log."""

    def __init__(self, partition: Partition, next_offset: int, stored_id: str, current_id: str) -> None:
        self.partition, self.next_offset = partition, next_offset
        self.stored_id, self.current_id = stored_id, current_id
        self.log_start, self.log_end = 0, 0  # of the old log: unknown, and meaningless in the new one
        SpoutError.__init__(
            self, f"data loss on {partition.id}: topic {partition.topic} was re-created (its id was {stored_id}, "
                  f"now {current_id}); the stored next offset {next_offset} belongs to the old log; set "
                  f"data_loss: skip to read the new log from its start, or rewind the pipeline")

    def __reduce__(self) -> tuple[object, ...]:
        return (TopicRecreatedError, (self.partition, self.next_offset, self.stored_id, self.current_id))


#: The spout errors a coordinator must never retry: a replay cannot bring deleted offsets back.
#: (PartitionUnavailableError is transient: the batch waits and retries.)
FATAL: tuple[type[BaseException], ...] = (DataLossError,)
