"""Server-side CQL errors and their ERROR-message payloads (spec section 9).

Every failure the server reports is a `CqlError`; `encode_body` produces the
exact bytes the DataStax driver decodes into `InvalidRequest`, `WriteTimeout`,
`Unavailable`, ... so tests see the same exceptions as against Cassandra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from .wire import Writer


class CqlError(Exception):
    """Base class: an ERROR response with `code` and a human message."""

    code: int = 0x0000

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        """Append code-specific fields after <code><message>; none by default."""

    def encode_body(self, protocol_version: int) -> bytes:
        from .wire import Writer

        w = Writer().int(self.code).string(self.message)
        self.write_extra(w, protocol_version)
        return w.getvalue()


class ServerError(CqlError):
    code = 0x0000


class ProtocolError(CqlError):
    code = 0x000A


class AuthenticationError(CqlError):
    code = 0x0100


class UnavailableError(CqlError):
    code = 0x1000

    def __init__(self, message: str, consistency: str, required: int, alive: int) -> None:
        super().__init__(message)
        self.consistency, self.required, self.alive = consistency, required, alive

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        w.consistency(self.consistency).int(self.required).int(self.alive)


class OverloadedError(CqlError):
    code = 0x1001


class IsBootstrappingError(CqlError):
    code = 0x1002


class WriteTimeoutError(CqlError):
    code = 0x1100

    def __init__(self, message: str, consistency: str, received: int, block_for: int,
                 write_type: str, contentions: int = 0) -> None:
        super().__init__(message)
        self.consistency, self.received, self.block_for = consistency, received, block_for
        self.write_type, self.contentions = write_type, contentions

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        w.consistency(self.consistency).int(self.received).int(self.block_for)
        w.string(self.write_type)
        if protocol_version >= 5 and self.write_type == "CAS":
            w.short(self.contentions)  # v5 only: <contentions> for CAS timeouts


class ReadTimeoutError(CqlError):
    code = 0x1200

    def __init__(self, message: str, consistency: str, received: int, block_for: int,
                 data_present: bool) -> None:
        super().__init__(message)
        self.consistency, self.received, self.block_for = consistency, received, block_for
        self.data_present = data_present

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        w.consistency(self.consistency).int(self.received).int(self.block_for)
        w.byte(1 if self.data_present else 0)


class SyntaxError_(CqlError):
    """CQL syntax error (0x2000); trailing underscore avoids shadowing the builtin."""

    code = 0x2000


class UnauthorizedError(CqlError):
    code = 0x2100


class InvalidRequest(CqlError):
    code = 0x2200


class ConfigurationError(CqlError):
    code = 0x2300


class AlreadyExistsError(CqlError):
    code = 0x2400

    def __init__(self, keyspace: str, table: str = "") -> None:
        if table:
            message = f'Cannot add already existing table "{table}" to keyspace "{keyspace}"'
        else:
            message = f'Cannot add existing keyspace "{keyspace}"'
        super().__init__(message)
        self.keyspace, self.table = keyspace, table

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        w.string(self.keyspace).string(self.table)


class UnpreparedError(CqlError):
    code = 0x2500

    def __init__(self, prepared_id: bytes) -> None:
        super().__init__(f"Prepared query with ID {prepared_id.hex()} not found "
                         "(either the query was not prepared on this host (maybe the host has been "
                         "restarted?) or you have prepared too many queries and it has been evicted "
                         "from the internal cache)")
        self.prepared_id = prepared_id

    def write_extra(self, w: Writer, protocol_version: int) -> None:
        w.short_bytes(self.prepared_id)
