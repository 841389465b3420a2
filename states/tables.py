"""The service's own tables, kept beside the pipelines' state tables: names no map state may take.

The backends create them (the store's in their txid stores, the owners table in their ``owners`` modules);
:mod:`states.ownership` refuses a state table named like one of them.
"""

from __future__ import annotations

#: The transactional-state store's tables: no map state may be named like them.
STORE_TABLES = frozenset({"trident_state", "trident_state_lease"})
#: Where table claims are recorded, in the SQLite file or the Cassandra keyspace.
OWNERS_TABLE = "trident_table_owners"
#: Table names a pipeline's state may not use.
RESERVED_TABLES = STORE_TABLES | {OWNERS_TABLE}
