"""The coordinator's documents in a topology's transactional-state store, and a read-only view for tools.

The coordinator reads and writes its progress only through this module. The documents (JSON):

- ``coordinator`` (:data:`COMMITTED_KEY`), the committed marker::

      {"committed_txid": 7, "committed_at": 1763900000.25}

  ``committed_at`` is the wall-clock time (Unix seconds) of the mark; markers written before it
  was stored have none (read as ``None``). No marker means nothing was ever committed (txid 0).

- ``batches/<txid, 20 digits>`` (:data:`BATCHES_NAMESPACE`, kept by a
  :class:`~states.rotating.RotatingTransactionalState`), one per frozen or committed txid::

      {"attempt": 2, "plan": {"v": 1, "txid": 8, "partitions": {"events:0": {...}}}}

  ``plan`` is :meth:`spouts.metadata.BatchPlan.to_json`: the ranges every attempt of the txid reads.
  ``attempt`` is the attempt that last started the txid; a replay stores ``attempt + 1`` (fenced)
  before it reads anything, so attempt numbers survive a crash. Older documents are a bare plan
  (``{"v": 1, "txid": ..., "partitions": ...}``): their attempt is unknown and read as 1.

- ``dead_letters/<txid, 20 digits>`` (:data:`DEAD_LETTERS_NAMESPACE`), the dead-letter topic's end
  offsets before the first dead letter of the txid was produced (:mod:`app.bad_records.dead_letters`); only the
  latest txid's is kept::

      {"start": {"0": 17, "1": 4}}

- ``isolated/<txid, 20 digits>`` (:data:`ISOLATED_NAMESPACE`), the records the transforms of a txid
  fail on, once the executor has isolated them, with the ranges they were found in (a replay of the
  same ranges reuses them instead of isolating again); txids older than the retention window are
  forgotten::

      {"ranges": [["events", 0, 100, 200]], "records": [["events", 0, 117, "transform",
                                                          "CAST_INVALID_INPUT", "..."]]}

- ``tables/<where>`` (:data:`TABLES_NAMESPACE`), one per state table the pipeline created or found (``where``
  as :meth:`states.factory.StateFactory.where` names it), with the txid that did: a recorded table that
  is missing was lost, while one not recorded may still be created (a sink that has not had a txid yet)::

      {"since_txid": 12}

- ``first_offsets`` (:data:`FIRST_OFFSETS_KEY`), per partition the first offset any txid of the
  pipeline covered, recorded (fenced) before the freeze of the first txid that planned the partition
  and never changed afterwards (no rewind, re-plan or rotation removes it); ``since_txid`` is the txid
  whose freeze created the document (1: it covers the pipeline's whole history; more: the pipeline
  ran before first offsets were recorded, so what came before is unknown)::

      {"since_txid": 1, "offsets": {"events:0": 0, "events:1": 0}}

  An audit (``python -m app audit``) recounts from there.

A txid at or below the marker is committed; a stored txid above it is frozen, not committed: its
next attempt replays exactly its plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spouts.metadata import BatchPlan, Partition
from states.protocols import TransactionalStateStore
from states.rotating import RotatingTransactionalState

COMMITTED_KEY = "coordinator"
BATCHES_NAMESPACE = "batches"
DEAD_LETTERS_NAMESPACE = "dead_letters"
ISOLATED_NAMESPACE = "isolated"
TABLES_NAMESPACE = "tables"
FIRST_OFFSETS_KEY = "first_offsets"


@dataclass(frozen=True, slots=True)
class CommittedMarker:
    """The last committed txid (0: none yet) and when it was marked (None if not recorded)."""

    txid: int = 0
    committed_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"committed_txid": self.txid, "committed_at": self.committed_at}

    @staticmethod
    def from_json(doc: Mapping[str, Any] | None) -> CommittedMarker:
        if not doc:
            return CommittedMarker()
        at = doc.get("committed_at")
        return CommittedMarker(int(doc["committed_txid"]), None if at is None else float(at))


@dataclass(frozen=True, slots=True)
class StoredBatch:
    """A txid's frozen plan together with the attempt that last started it."""

    plan: BatchPlan
    attempt: int = 1

    @property
    def txid(self) -> int:
        return self.plan.txid

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "plan": self.plan.to_json()}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> StoredBatch:
        if "plan" not in doc:  # a bare plan, as stored before attempts were kept
            return StoredBatch(BatchPlan.from_json(doc), 1)
        return StoredBatch(BatchPlan.from_json(doc["plan"]), int(doc["attempt"]))


@dataclass(frozen=True, slots=True)
class FirstOffsets:
    """Per partition the first offset the pipeline ever covered, and the txid that started recording them."""

    since_txid: int
    offsets: Mapping[Partition, int]

    def to_json(self) -> dict[str, Any]:
        return {"since_txid": self.since_txid, "offsets": {p.id: o for p, o in sorted(self.offsets.items())}}

    @staticmethod
    def from_json(doc: Mapping[str, Any] | None) -> FirstOffsets | None:
        if not doc:
            return None
        return FirstOffsets(int(doc["since_txid"]), {Partition.parse(p): int(o) for p, o in doc["offsets"].items()})


class ProgressLog:
    """The coordinator's handle on its documents; every write is fenced by the lease ``epoch``."""

    def __init__(self, store: TransactionalStateStore, *, epoch: int, retention: int = 16) -> None:
        self._store, self.epoch, self.retention = store, epoch, retention
        self._batches = RotatingTransactionalState(store, BATCHES_NAMESPACE, epoch=epoch, retention=retention)
        self._first: FirstOffsets | None = None  # read once, on the first freeze

    @property
    def store(self) -> TransactionalStateStore:
        """The store the documents live in (for the documents other modules own, e.g. :mod:`app.migrations`)."""
        return self._store

    def committed(self) -> CommittedMarker:
        return CommittedMarker.from_json(self._store.get(COMMITTED_KEY))

    def mark_committed(self, txid: int, *, at: float) -> CommittedMarker:
        """Record ``txid`` as the last committed one, at wall-clock time ``at``."""
        marker = CommittedMarker(txid, at)
        self._store.put(COMMITTED_KEY, marker.to_json(), epoch=self.epoch)
        return marker

    def batch(self, txid: int) -> StoredBatch | None:
        """The stored (frozen or committed) plan of ``txid`` and its attempt, or None."""
        doc = self._batches.get_state(txid)
        return None if doc is None else StoredBatch.from_json(doc)

    def store_batch(self, batch: StoredBatch) -> None:
        """Freeze ``batch.plan`` for its txid, or record a new attempt of an already frozen txid.

        A partition planned for the first time has its first offset recorded first (:meth:`first_offsets`)."""
        self._record_first_offsets(batch.plan)
        self._batches.override_state(batch.txid, batch.to_json())

    def first_offsets(self) -> FirstOffsets | None:
        """Per partition the first offset the pipeline covered (None: nothing recorded yet)."""
        return FirstOffsets.from_json(self._store.get(FIRST_OFFSETS_KEY))

    def _record_first_offsets(self, plan: BatchPlan) -> None:
        """Add the partitions of ``plan`` not recorded yet, at their first offset (one read per process,
        one write only when a partition is new)."""
        if self._first is None:
            self._first = self.first_offsets() or FirstOffsets(plan.txid, {})
        new = {p: m.first_offset for p, m in plan.partitions.items() if p not in self._first.offsets}
        if not new:
            return
        first = FirstOffsets(self._first.since_txid, {**self._first.offsets, **new})
        self._store.put(FIRST_OFFSETS_KEY, first.to_json(), epoch=self.epoch)
        self._first = first

    def dead_letter_start(self, txid: int) -> dict[int, int] | None:
        """Where the dead-letter topic ended (by partition) before ``txid``'s first dead letter, if recorded."""
        doc = self._store.get(f"{DEAD_LETTERS_NAMESPACE}/{txid:020d}")
        return None if doc is None else {int(p): int(o) for p, o in doc["start"].items()}

    def store_dead_letter_start(self, txid: int, start: Mapping[int, int]) -> None:
        """Record ``start`` for ``txid`` (fenced) and forget older txids' records."""
        self._store.put(f"{DEAD_LETTERS_NAMESPACE}/{txid:020d}", {"start": {str(p): o for p, o in start.items()}},
                        epoch=self.epoch)
        older = [k for k in self._store.keys(f"{DEAD_LETTERS_NAMESPACE}/") if int(k.rsplit("/", 1)[1]) < txid]
        if older:
            self._store.delete(older, epoch=self.epoch)

    def isolated(self, txid: int) -> dict[str, Any] | None:
        """The bad records stored for ``txid`` by :meth:`store_isolated`, or None."""
        doc = self._store.get(f"{ISOLATED_NAMESPACE}/{txid:020d}")
        return None if doc is None else dict(doc)

    def store_isolated(self, txid: int, doc: Mapping[str, Any]) -> None:
        """Keep ``txid``'s isolated bad records (fenced) and forget those of txids out of the retention window."""
        self._store.put(f"{ISOLATED_NAMESPACE}/{txid:020d}", dict(doc), epoch=self.epoch)
        older = [k for k in self._store.keys(f"{ISOLATED_NAMESPACE}/")
                 if int(k.rsplit("/", 1)[1]) < txid - self.retention]
        if older:
            self._store.delete(older, epoch=self.epoch)

    def tables(self) -> set[str]:
        """The state tables recorded as created or found (by where they live)."""
        return {k.split("/", 1)[1] for k in self._store.keys(f"{TABLES_NAMESPACE}/")}

    def record_table(self, where: str, txid: int) -> None:
        """Record (fenced) that the state table at ``where`` exists as of ``txid``: from now on it must stay."""
        self._store.put(f"{TABLES_NAMESPACE}/{where}", {"since_txid": txid}, epoch=self.epoch)

    def state_reset_txid(self) -> int:
        """The txid of the last rewind that emptied the state tables (``--reset-state``); 0 when none did.
        Until a txid is committed after it, the tables hold nothing and may be created."""
        return state_reset_txid(self._store)

    def batch_txids(self) -> list[int]:
        """The txids with stored plans, ascending."""
        return self._batches.txids

    def rotate(self, committed_txid: int) -> None:
        """After ``committed_txid`` commits, forget plans older than the retention window."""
        self._batches.rotate(committed_txid)


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a topology stands, as stored: what status tools show."""

    topology_id: str
    committed: CommittedMarker
    committed_plan: BatchPlan | None  # None when nothing was committed (or its plan has been rotated out)
    frozen: StoredBatch | None  # the lowest frozen txid above the committed one: the next to be replayed
    frozen_txids: tuple[int, ...]  # every frozen, uncommitted txid (several with max_pending > 1)

    @property
    def committed_txid(self) -> int:
        return self.committed.txid


def read_progress(store: TransactionalStateStore) -> Progress:
    """Read a topology's progress without the lease: it writes nothing."""
    log = ProgressLog(store, epoch=-1)  # never written through: the epoch is not used
    committed = log.committed()
    done = log.batch(committed.txid) if committed.txid else None
    pending = tuple(t for t in log.batch_txids() if t > committed.txid)
    frozen = log.batch(pending[0]) if pending else None
    return Progress(store.topology_id, committed, None if done is None else done.plan, frozen, pending)


# -- rewinds (written by ``python -m app rewind``) ---------------------------------------------

REWINDS_NAMESPACE = "rewinds"


def record_rewind(store: TransactionalStateStore, *, epoch: int, txid: int, audit: Mapping[str, Any]) -> None:
    """The audit line of a rewind committed as ``txid`` (who, when, from, to, reset_state), fenced by ``epoch``."""
    store.put(f"{REWINDS_NAMESPACE}/{txid:020d}", dict(audit), epoch=epoch)


def read_rewinds(store: TransactionalStateStore) -> list[dict[str, Any]]:
    """Every rewind's audit line, oldest first."""
    return [dict(store.get(k) or {}) for k in store.keys(f"{REWINDS_NAMESPACE}/")]


def state_reset_txid(store: TransactionalStateStore) -> int:
    """The txid of the last completed rewind with ``--reset-state`` (0: none)."""
    return max((int(a["txid"]) for a in read_rewinds(store) if a.get("reset_state") and a.get("done")), default=0)
