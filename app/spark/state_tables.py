"""Which state tables a txid may create, and which must be there: a lost table is never re-created empty.

A table that the progress log records (:meth:`app.coordinator.progress.ProgressLog.record_table`) held committed state,
so finding it missing is :class:`~states.errors.StateTableMissingError`. A table not recorded has had no txid
yet (a new pipeline, a sink added to an existing one, a sink no key has reached), so a txid creates it
and records it before writing into it. A rewind with ``--reset-state`` empties the tables: until a txid
commits after it, every table may be created again. A table made before tables were recorded is recorded
when the pipeline starts and finds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.migrations import refuse_moved
from app.spark.plan import CompiledSink
from app.topology.batch import Batch


class StateTables:
    """The executor's view of its sinks' tables: checked at start, created (and recorded) by the first txid."""

    def __init__(self, sinks: Sequence[CompiledSink]) -> None:
        self.sinks = sinks
        # once read: the txid of the last rewind that emptied the tables, and where the recorded tables live
        self._loaded: tuple[int, set[str]] | None = None

    def check(self, committed_txid: int, progress: Any) -> None:
        """Raise StateTableMissingError for a recorded table that is gone (``committed_txid`` committed into
        it), SchemaMismatchError for one of another shape or one migrated to another layout; record a table found but not recorded yet. Before the
        first txid, so an idle pipeline stops too."""
        reset_txid, tables = self._load(progress)
        if progress is not None:  # a table migrated away (app.migrations): the config must name the new one
            for c in self.sinks:
                refuse_moved(progress.store, c.sink.factory.where(c.spec), c.sink.factory.pipeline)
        if progress is None or committed_txid <= reset_txid:
            return
        for c in self.sinks:
            factory, where = c.sink.factory, c.sink.factory.where(c.spec)
            if where in tables:
                factory.check_table(c.spec, committed_txid)
            elif factory.backend != "memory" and factory.has_table(c.spec):
                factory.check_table(c.spec, 0)  # of the shape the sink writes
                self._record(progress, where, committed_txid)

    def committed_into(self, c: CompiledSink, batch: Batch) -> int:
        """The last txid committed into ``c``'s table before ``batch``: 0 (it may be created) when the table is
        not recorded, or when a rewind emptied the tables and no txid has committed since."""
        reset_txid, tables = self._load(batch.progress)
        if batch.txid - 1 <= reset_txid or c.sink.factory.where(c.spec) not in tables:
            return 0
        return batch.txid - 1

    def create(self, batch: Batch) -> None:
        """Create (if absent) and record every table ``batch`` may create, whatever it holds: a txid that gives
        a sink no key is committed too, and the table must be there for the txids after it."""
        for c in self.sinks:
            if self.committed_into(c, batch) == 0:
                c.sink.factory.make_state(c.spec, committed_txid=0)
                if batch.progress is not None and c.sink.factory.backend != "memory":
                    self._record(batch.progress, c.sink.factory.where(c.spec), batch.txid)

    def _record(self, progress: Any, where: str, txid: int) -> None:
        tables = self._load(progress)[1]
        if where not in tables:
            progress.record_table(where, txid)
            tables.add(where)

    def _load(self, progress: Any) -> tuple[int, set[str]]:
        """The reset txid and the recorded tables, read from ``progress`` the first time."""
        if self._loaded is None:
            self._loaded = (0, set()) if progress is None else (progress.state_reset_txid(), progress.tables())
        return self._loaded
