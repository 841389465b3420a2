"""Every key of a state table in Cassandra, page by page (a full scan: its cost grows with the table)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from states.cassandra.schema import check_cql_identifier
from states.cassandra.session import CassandraClient, shared_client
from states.cassandra.settings import CassandraSettings
from states.spec import MapSpec


def scan_keys(settings: CassandraSettings, spec: MapSpec, *, page_size: int = 5000,
              client: CassandraClient | None = None) -> Iterator[tuple[Any, ...]]:
    """The key tuples of ``spec``'s table (in token order), read at the settings' consistency."""
    client = client or shared_client(settings)
    keyspace = check_cql_identifier(settings.keyspace, "keyspace name")
    table = check_cql_identifier(spec.table, "table name")
    names = [c.name for c in spec.key]
    stmt = client.prepare(f"SELECT {', '.join(names)} FROM {keyspace}.{table}", idempotent=True)
    bound = stmt.bind(())
    bound.fetch_size = page_size
    for row in client.session.execute(bound, timeout=max(settings.request_timeout_s, 60.0)):
        yield tuple(row[n] for n in names) if isinstance(row, dict) else tuple(row)


def scan_rows(settings: CassandraSettings, spec: MapSpec, *, page_size: int = 5000,
              client: CassandraClient | None = None) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every ``(key tuple, stored value)`` of ``spec``'s table, page by page (the stored value as the backing map
    decodes it: an ``OpaqueValue`` or ``TransactionalValue``). Each row is read whole, so its value and txid
    agree; rows written while the scan runs may be seen before or after the write."""
    from states.layout import RowLayout

    client = client or shared_client(settings)
    keyspace = check_cql_identifier(settings.keyspace, "keyspace name")
    table = check_cql_identifier(spec.table, "table name")
    layout = RowLayout(spec)
    n = len(layout.key_columns)
    names = [c for c, _ in layout.columns]
    stmt = client.prepare(f"SELECT {', '.join(names)} FROM {keyspace}.{table}", idempotent=True)
    bound = stmt.bind(())
    bound.fetch_size = page_size
    for row in client.session.execute(bound, timeout=max(settings.request_timeout_s, 60.0)):
        values = tuple(row[c] for c in names) if isinstance(row, dict) else tuple(row)
        yield values[:n], layout.value_of(values[n:])
