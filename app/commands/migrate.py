"""``migrate``: copy a pipeline's Cassandra state tables into another layout (a partition per key, or N shards).

The copy goes to a new table, ``<table>_s<N>`` (``<table>`` without an earlier ``_s<M>`` suffix; ``_s0``: a
partition per key, as ``cassandra.shards: 0`` means), under the pipeline's lease, so no service writes while
it runs. Every row keeps its ``txid``, values and ``prev_*`` exactly (:mod:`states.cassandra.migration`): a
txid frozen mid-commit replays exactly on the copy. The steps, per table:

1. Record the migration as ``copying`` (:mod:`app.migrations`): from here no service starts on the old table.
2. Create the new table; copy the rows page by page, recording after each page the last token wholly copied.
   A copy killed at any point resumes from there when the same command runs again.
3. Verify: the row count and a checksum over every row's key and stored columns, in both tables.
4. Only then switch: record the new table as the pipeline's (it must stay, like any table committed into),
   claim it for the pipeline, and mark the migration ``done``. The config stays what names the table: the
   service refuses to start until the config names the new table and shard count, and says which.

The old table is kept; drop it after checking the new one (docs/operations.md, "Changing a table's layout").
"""

from __future__ import annotations

import argparse
import logging
import socket
import time
from dataclasses import replace
from typing import Any

from app.commands.common import (
    BAD_INPUT,
    FAILED,
    OK,
    REFUSED,
    CommandError,
    add_config,
    compile_all,
    load_config,
    parser,
    pipeline_of,
    progress,
)

SUMMARY = "copy a pipeline's Cassandra state tables into another layout (a partition per key or N shards)"
LEASE_TTL_S = 120.0  # renewed after every page; a killed migrate blocks the service this long (or until rerun)
log = logging.getLogger("app.migrate")


def add(sub: Any) -> None:
    p = parser(sub, "migrate", SUMMARY,
               "python -m app migrate --config examples/wordcount.yaml --pipeline word-count --shards 16")
    add_config(p)
    p.add_argument("--pipeline", required=True, metavar="ID", help="the pipeline whose tables to migrate")
    p.add_argument("--shards", required=True, type=int, metavar="N",
                   help="the new layout: N shards, or 0 for a partition per key (as cassandra.shards means)")
    p.add_argument("--page-size", type=int, default=1000, metavar="ROWS",
                   help="rows copied between two recorded resume points (default 1000)")
    p.add_argument("--owner", default=f"migrate@{socket.gethostname()}",
                   help="the lease owner this migration writes as (default migrate@HOSTNAME); a killed migration "
                        "run again as the same owner resumes at once")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from states.cassandra.shards import check_shards

    try:
        shards = check_shards(args.shards)
    except ValueError as e:
        msg = f"--shards {args.shards}: {e}"
        raise CommandError(msg, BAD_INPUT) from None
    if args.page_size < 1:
        msg = f"--page-size {args.page_size}: must be at least 1"
        raise CommandError(msg, BAD_INPUT)
    config = load_config(args.config)
    pipeline = pipeline_of(config, args.pipeline)
    compiled = next(c for c in compile_all(config, args.config) if c.id == pipeline.id)
    factory = compiled.state
    if factory.backend != "cassandra":
        msg = (f"pipeline {pipeline.id!r}: its state is on {factory.backend}, which has one layout; "
               "shards are a Cassandra table layout (state.backend: cassandra)")
        raise CommandError(msg, BAD_INPUT)
    if all(shards == sink.factory.shards_of(sink.name) for _, sink in compiled.topology.sinks):
        msg = f"pipeline {pipeline.id!r}: its tables are already laid out as --shards {shards} (cassandra.shards)"
        raise CommandError(msg, BAD_INPUT)
    done = migrate(compiled, shards, owner=args.owner, page_size=args.page_size)
    for doc in done:
        print(f"pipeline {pipeline.id}: table {doc['from']} ({_layout(doc['from_shards'])}) copied to {doc['to']} "
              f"({_layout(doc['to_shards'])}): {doc['rows']} rows, checksum {doc['checksum']} verified")
    tables = ", ".join(f"state.table: {doc['to_table']}" for doc in done)
    pinned = factory.cassandra_settings().shards is not None
    print(f"next: set {tables}{f' and cassandra.shards: {shards}' if pinned else ''} in the config, then start the "
          "service (it refuses the old table until then)")
    drops = "; ".join(f"DROP TABLE {doc['from']}" for doc in done)
    print(f"the old table(s) are kept: after checking the new one, drop them ({drops})")
    return OK


def migrate(compiled: Any, shards: int, *, owner: str, page_size: int) -> list[dict[str, Any]]:
    """Take the lease, migrate every table of ``compiled`` to ``shards``, release; the migrations' documents."""
    store = compiled.store()
    epoch = _acquire(store, owner, compiled.id)
    try:
        from app.coordinator.progress import read_progress

        prog = read_progress(store)
        return [_migrate_table(compiled, sink, shards, store, owner=owner, epoch=epoch, page_size=page_size,
                               committed_txid=prog.committed_txid)
                for _, sink in compiled.topology.sinks]
    finally:
        _release(store, owner, epoch, compiled.id)


def _migrate_table(compiled: Any, sink: Any, shards: int, store: Any, *, owner: str, epoch: int, page_size: int,
                   committed_txid: int) -> dict[str, Any]:
    """One table: record, copy (resuming a recorded copy), verify, switch. Returns its ``done`` document."""
    from app.migrations import DONE, moved_reason, read_migration

    where = f"{sink.factory.cassandra_settings().keyspace}.{sink.name}"
    doc = read_migration(store, where)
    if doc is not None and doc.get("state") == DONE and int(doc["to_shards"]) == shards:
        progress(f"table {where} was migrated to {doc['to']} already: nothing to copy")
        return doc  # run again (e.g. after a later table of the pipeline failed): done is done
    if doc is not None and doc.get("state") == DONE:
        raise CommandError(moved_reason(doc, compiled.id), BAD_INPUT)
    if doc is not None and int(doc["to_shards"]) != shards:
        msg = (f"table {where}: refused: its migration to {doc['to']} ({_layout(int(doc['to_shards']))}) is not "
               f"finished: run python -m app migrate --pipeline {compiled.id} --shards {doc['to_shards']} to finish it")
        raise CommandError(msg, REFUSED)
    move = _TableMove(compiled.id, sink, shards, store, owner=owner, epoch=epoch)
    move.check(committed_txid)
    move.start(doc)
    move.copy(page_size)
    return move.verify_and_switch(committed_txid)


class _TableMove:
    """One table's migration, step by step (the numbers of the module's docstring)."""

    def __init__(self, pipeline_id: str, sink: Any, shards: int, store: Any, *, owner: str, epoch: int) -> None:
        from app.query import stored_spec
        from states.cassandra.migration import TableCopy, layout_table
        from states.cassandra.session import shared_client

        self.pipeline_id, self.store, self.owner, self.epoch, self.shards = pipeline_id, store, owner, epoch, shards
        self.factory = sink.factory
        settings = self.factory.cassandra_settings()
        self.source_shards = self.factory.shards_of(sink.name)
        self.where = f"{settings.keyspace}.{sink.name}"
        try:
            self.spec = stored_spec(sink)
        except LookupError as e:
            msg = f"pipeline {pipeline_id!r}: nothing to migrate: {e}"
            raise CommandError(msg, BAD_INPUT) from None
        try:
            self.target = layout_table(self.spec.table, shards)
        except ValueError as e:  # a name too long for the suffix
            msg = f"table {self.where}: no name for its copy: {e}"
            raise CommandError(msg, BAD_INPUT) from None
        self.target_factory = replace(self.factory, cassandra=replace(settings, shards=shards))
        self.target_spec = replace(self.spec, table=self.target)
        self.copier = TableCopy(shared_client(settings), settings.keyspace, self.spec,
                                source_shards=self.source_shards, target_table=self.target, target_shards=shards)
        self.doc: dict[str, Any] = {}

    def check(self, committed_txid: int) -> None:
        """The table has the layout the config says (else SchemaMismatchError) and a name of its own to move to."""
        self.factory.check_table(self.spec, committed_txid)
        if self.target == self.spec.table:
            msg = (f"table {self.where}: its new name {self.target} would be its own: "
                   "configure a table name without the _s<N> suffix")
            raise CommandError(msg, BAD_INPUT)

    def start(self, doc: dict[str, Any] | None) -> None:
        """1. Record the migration (or take up the recorded one), then create the new table."""
        from app.migrations import COPYING, record_migration

        if doc is None:
            if self.target_factory.has_table(self.target_spec):
                name = self.target_factory.where(self.target_spec)
                msg = (f"table {name} exists already (kept from an earlier migration?): check it and drop it "
                       f"(DROP TABLE {name}), then migrate again")
                raise CommandError(msg, REFUSED)
            doc = {"from": self.where, "from_shards": self.source_shards,
                   "to": self.target_factory.where(self.target_spec), "to_table": self.target,
                   "to_shards": self.shards, "state": COPYING, "after_token": None, "copied": 0, "who": self.owner,
                   "started_at": time.time()}
            record_migration(self.store, doc, epoch=self.epoch)  # from here no service starts on the old table
        else:
            progress(f"resuming the copy of {self.where} into {doc['to']} after {doc['copied']} rows")
        self.doc = doc
        self.copier.create_target()
        self.target_factory.check_table(self.target_spec, 0)

    def copy(self, page_size: int) -> None:
        """2. Copy the rows after the recorded token, recording the resume point after every page."""
        from app.migrations import record_migration

        doc, before = self.doc, int(self.doc["copied"])

        def on_page(after_token: int | None, copied: int) -> None:
            doc.update(after_token=after_token, copied=before + copied)
            record_migration(self.store, doc, epoch=self.epoch)
            self.store.renew_lease(self.owner, self.epoch, LEASE_TTL_S)
            progress(f"{self.where} -> {doc['to']}: {doc['copied']} rows copied")

        self.copier.copy(doc["after_token"], page_size, on_page)

    def verify_and_switch(self, committed_txid: int) -> dict[str, Any]:
        """3. Compare count and checksum of both tables; 4. only then record the new table as the pipeline's."""
        from app.coordinator.progress import ProgressLog
        from app.migrations import DONE, record_migration
        from states.ownership import claim_table

        doc = self.doc
        source, copy = self.copier.fingerprint(), self.copier.fingerprint(self.copier.target)
        if source != copy:
            doc.update(after_token=None, copied=0)  # a run again copies every row again
            record_migration(self.store, doc, epoch=self.epoch)
            msg = (f"table {self.where}: the copy {doc['to']} does not match ({copy.rows} rows, checksum "
                   f"{copy.checksum}; the table has {source.rows}, {source.checksum}): nothing switched; "
                   "run the migration again")
            raise CommandError(msg, FAILED)
        ProgressLog(self.store, epoch=self.epoch).record_table(doc["to"], committed_txid)  # it must stay from now on
        claim_table(self.target_factory, self.target, self.pipeline_id)
        doc.update(state=DONE, rows=source.rows, checksum=source.checksum, finished_at=time.time())
        record_migration(self.store, doc, epoch=self.epoch)
        log.info("migration of %s by %s: %s (%s) -> %s (%s), %d rows, checksum %s", self.pipeline_id, self.owner,
                 self.where, _layout(self.source_shards), doc["to"], _layout(self.shards), source.rows,
                 source.checksum)
        return doc


def _acquire(store: Any, owner: str, pipeline_id: str) -> int:
    from states.errors import LeaseHeldError

    try:
        return int(store.acquire_lease(owner, LEASE_TTL_S))
    except LeaseHeldError as e:
        info = store.lease_info()
        expiry = "" if info is None or info.expires_at is None else \
            f", lease expires at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(info.expires_at))}"
        msg = (f"pipeline {pipeline_id!r}: refused: the lease is held by {e.owner!r} (epoch {e.epoch}{expiry}); "
               "stop the service first (every instance: a standby would take over)")
        raise CommandError(msg, REFUSED) from None


def _release(store: Any, owner: str, epoch: int, pipeline_id: str) -> None:
    """Give the lease up; when the store cannot tell whether it did, say so: the lease expires with its TTL."""
    from states.errors import StateError

    try:
        store.release_lease(owner, epoch)
    except StateError as e:
        log.warning("pipeline %s: the lease (owner %s, epoch %d) may still be held: %s; it expires within %.0f s",
                    pipeline_id, owner, epoch, e, LEASE_TTL_S)


def _layout(shards: int) -> str:
    return f"{shards} shards" if shards else "a partition per key"
