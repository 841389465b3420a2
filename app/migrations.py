"""Layout migrations of a pipeline's state tables, as recorded in its transactional-state store.

``python -m app migrate`` (:mod:`app.commands.migrate`) copies a table into another layout under the
pipeline's lease and records it here; the config stays what names a pipeline's table and layout. One
document per migrated table, ``migrations/<where>`` (``where`` as
:meth:`states.factory.StateFactory.where` names the old table), written fenced by the lease::

    {"from": "ks.word_counts", "from_shards": 0, "to": "ks.word_counts_s16", "to_table": "word_counts_s16",
     "to_shards": 16, "state": "copying", "after_token": -3074457345618258603, "copied": 120000, ...}

``state`` is ``copying`` until the copy is verified, then ``done`` (with ``rows`` and ``checksum``). A
pipeline whose config still names a table with a document refuses to start (:func:`refuse_moved`): while
``copying``, a write into the old table would be lost to the copy; once ``done``, the pipeline's state
lives in the new table, and the config must say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from states.errors import SchemaMismatchError
from states.protocols import TransactionalStateStore

MIGRATIONS_NAMESPACE = "migrations"
COPYING, DONE = "copying", "done"


def migration_key(where: str) -> str:
    return f"{MIGRATIONS_NAMESPACE}/{where}"


def read_migration(store: TransactionalStateStore, where: str) -> dict[str, Any] | None:
    """The migration document of the table at ``where`` (None: never migrated)."""
    doc = store.get(migration_key(where))
    return dict(doc) if isinstance(doc, Mapping) else None


def record_migration(store: TransactionalStateStore, doc: Mapping[str, Any], *, epoch: int) -> None:
    """Store ``doc`` (fenced by the lease ``epoch``) as the migration of the table it names ``from``."""
    store.put(migration_key(str(doc["from"])), dict(doc), epoch=epoch)


def moved_reason(doc: Mapping[str, Any], pipeline_id: str) -> str:
    """Why a pipeline whose config names the table of ``doc`` must not start, and what to do: one line."""
    shards, table = int(doc["to_shards"]), doc["to_table"]
    if doc.get("state") != DONE:
        return (f"table {doc['from']} is being migrated to {doc['to']} (a copy not finished or interrupted): "
                f"run python -m app migrate --pipeline {pipeline_id} --shards {shards} again to finish it")
    return (f"table {doc['from']} was migrated to {doc['to']} ({_layout(shards)}): set state.table: {table} in the "
            f"config, and cassandra.shards: {shards} if the config sets it (the old table is kept until you drop it)")


def refuse_moved(store: TransactionalStateStore, where: str, pipeline_id: str) -> None:
    """Raise SchemaMismatchError if the table at ``where`` was migrated (or is being migrated) away."""
    doc = read_migration(store, where)
    if doc is not None:
        raise SchemaMismatchError(moved_reason(doc, pipeline_id))


def _layout(shards: int) -> str:
    return f"{shards} shards" if shards else "a partition per key"
