"""Table claims in a Cassandra keyspace: ``trident_table_owners``, written with ``INSERT ... IF NOT EXISTS``.

The lightweight transaction makes the first claim win across processes. Its outcome may be
unknown (a timeout): then a serial read, which completes any Paxos round in flight, tells the
owner for certain; no row means nothing landed, and the claim is sent again (a few times).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from states.cassandra.schema import TableShape, ensure_table
from states.cassandra.session import shared_client
from states.cassandra.unknown import serial
from states.errors import StateError
from states.metrics import STATE_METRICS
from states.tables import OWNERS_TABLE

if TYPE_CHECKING:
    from states.factory import StateFactory

_ATTEMPTS = 3


def claim(factory: StateFactory, table: str, topology_id: str) -> str:
    """The owner of ``table`` after claiming it for ``topology_id`` (the first claim wins)."""
    settings = factory.cassandra_settings()
    client = shared_client(settings)
    shape = TableShape(settings.keyspace, OWNERS_TABLE, (("table_name", "text"), ("topology", "text")),
                       ("table_name",))
    ensure_table(client, shape, STATE_METRICS)
    insert = client.prepare(f"INSERT INTO {shape.name} (table_name, topology) VALUES (?, ?) IF NOT EXISTS",
                            idempotent=False)
    select = client.prepare(f"SELECT topology FROM {shape.name} WHERE table_name = ?", idempotent=True)
    for _ in range(_ATTEMPTS):
        result = client.run([(insert, (table, topology_id))], kind="cas", metrics=STATE_METRICS, lwt=True)[0]
        if not isinstance(result, BaseException):
            row = result.one()
            return str(topology_id if row["[applied]"] else row["topology"])
        row = client.run_one(serial(client, select, (table,)), None, kind="serial_read", metrics=STATE_METRICS).one()
        if row is not None:
            return str(row["topology"])
    msg = (
        f"claiming table {table!r} for {topology_id!r}: no outcome after {_ATTEMPTS} attempts "
        f"({result!r})"
    )
    raise StateError(msg) from result
