"""What the pipe and the sharded batches ask of a Cassandra backing map: its statements and their answers.

:class:`~states.cassandra.backing_map.CassandraBackingMap` builds each request and reads each answer;
:mod:`.pipe` (one window of reads and LWTs) and :mod:`.batches` (a conditional batch per shard) only send
them and decide what to do with the answers, so they see the map through this protocol and never import it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Protocol

from cassandra.cluster import ResultSet
from cassandra.query import PreparedStatement

from states.cassandra.session import CassandraClient
from states.layout import Row
from states.metrics import StateMetrics
from states.protocols import CasResult


class CasRequests(Protocol):
    """A backing map's client, metrics, statements and the decoding of their answers."""

    client: CassandraClient
    metrics: StateMetrics

    @property
    def select(self) -> PreparedStatement:
        """The SELECT of a key's stored columns, in stored-column order."""
        ...

    @property
    def select_shard(self) -> PreparedStatement:
        """The SELECT of a sharded table's rows by shard and each key column IN a list."""
        ...

    @property
    def stored_columns(self) -> list[str]:
        """The stored columns, in the order of a stored row."""
        ...

    def shard_read_values(self, key_rows: Sequence[Row]) -> tuple[Any, ...]:
        """The values of :attr:`select_shard` reading ``key_rows`` (of one shard)."""
        ...

    def read_request(self, key: Hashable) -> tuple[PreparedStatement, Row]:
        """The SELECT of ``key``'s stored columns, and its key row."""
        ...

    def cas_request(self, key: Hashable, expected: Any, value: Any) -> tuple[PreparedStatement, Row, Row, Row]:
        """``(statement, values, key row, stored row wanted)`` of the LWT writing ``value`` over ``expected``."""
        ...

    def decode_read(self, rs: ResultSet) -> Any:
        """The value a read's answer holds."""
        ...

    def decode_cas(self, rs: ResultSet) -> CasResult[Any]:
        """A compare-and-set's answer."""
        ...

    def stored_row(self, value: Any) -> Row | None:
        """The stored columns of ``value`` (None: absent), as a compare-and-set is conditioned on them."""
        ...

    def rows_returned(self, rs: ResultSet) -> dict[Row, Row]:
        """The stored rows a conditional batch that did not apply returned, by key row."""
        ...

    def value_of_row(self, row: Row | None) -> Any:
        """The value a stored row holds (None: absent)."""
        ...

    def refused(self, error: BaseException, key: Row | None = None) -> BaseException:
        """The typed error of a request the server refused as invalid; any other error as it is."""
        ...
