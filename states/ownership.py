"""Which pipeline a state table belongs to: one owner per table, recorded where the table lives.

Two topologies writing one table would mix their txids in its rows and corrupt it silently
(each takes the other's stored txid for a replay of its own). So a topology claims each table it
writes before its first batch: the first claim records the owner, a later claim by the same
topology passes, and a claim by another topology raises :class:`TableOwnedError`, which names
both and is permanent (retrying cannot help: rename a table, or drop the claim on purpose).

The claim lives beside the tables: a row of ``trident_table_owners`` in the SQLite file or the
Cassandra keyspace (``INSERT ... IF NOT EXISTS``), or a process-wide dict for the memory backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from states.errors import StateError
from states.spec import check_identifier
from states.tables import RESERVED_TABLES

if TYPE_CHECKING:
    from states.factory import StateFactory



class TableOwnedError(StateError):
    """A table already belongs to another topology; permanent: rename one of the two tables."""

    def __init__(self, table: str, owner: str, claimant: str) -> None:
        self.table, self.owner, self.claimant = table, owner, claimant
        super().__init__(f"table {table!r} belongs to pipeline {owner!r}; pipeline {claimant!r} may not write it "
                         f"(two pipelines writing one table corrupt it): give pipeline {claimant!r} another "
                         f"state.table")


def check_claimable(table: str) -> str:
    """``table`` if a map state may use it, else ValueError (a store table or the owners table)."""
    check_identifier(table, "table name")
    if table in RESERVED_TABLES:
        msg = (
            f"table name {table!r} is reserved for the service's own tables "
            f"({', '.join(sorted(RESERVED_TABLES))})"
        )
        raise ValueError(msg)
    return table


def claim_table(factory: StateFactory, table: str, topology_id: str) -> None:
    """Record ``topology_id`` as the owner of ``table`` on the factory's backend, or raise TableOwnedError."""
    check_claimable(table)
    if factory.backend == "memory":
        from states.memory.owners import claim
    elif factory.backend == "sqlite":
        from states.sqlite.owners import claim
    else:
        from states.cassandra.owners import claim
    owner = claim(factory, table, topology_id)
    if owner != topology_id:
        raise TableOwnedError(table, owner, topology_id)
