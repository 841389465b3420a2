"""The batch coordinator: plans txids, overlaps their processing, and commits them strictly in order.

One coordinator per topology id is active (a lease in the transactional-state store). Per txid:

1. **Plan**: each partition continues from the last committed (or in-flight earlier) range.
2. **Process**: the executor reads exactly those ranges and pre-aggregates; no state is touched.
3. **Freeze**: before the first state write, the plan is stored for the txid with its attempt
   number (fenced by the lease epoch); every replay of the txid re-reads exactly these ranges.
4. **Commit**: the executor applies the batch through the states; then the txid is marked
   committed (fenced), the spout is told, and the rotating state forgets old txids.

A failure of txid N fails every later in-flight txid too; N is replayed (from its frozen plan if
it has one, storing the next attempt number first). Whether a failure is retried or stops the
pipeline is decided by :class:`app.failures.policy.FailurePolicy`, never here. Transactional spouts freeze at plan time, so
their txids never change content. Every stored document goes through :mod:`app.coordinator.progress`; the loop
that drives :meth:`Coordinator.step` is :mod:`app.coordinator.loop`; docs/design.md walks one txid through it all.

The coordinator composes its parts: :mod:`app.coordinator.lease_hold` (the lease), :mod:`app.coordinator.inflight` (the txids being
processed), :mod:`app.coordinator.planning` (what a plan says before it runs), :mod:`app.coordinator.failure_streak` (failures in a
row and the degraded state), :mod:`app.coordinator.phases` (phase timing) and :mod:`app.coordinator.fenced` (the store it writes through).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from app.bad_records.error_policy import BadRecordHandler, ErrorPolicy, handler_for
from app.coordinator.failure_streak import Degraded, FailureStreak, frozen_read_lost
from app.coordinator.fenced import FencedStore
from app.coordinator.inflight import InFlight
from app.coordinator.lease import unique_owner
from app.coordinator.lease_hold import LeaseHold
from app.coordinator.loop import NO_CALLBACKS, Callbacks, Outcome, run_steps
from app.coordinator.phases import PhaseTimer
from app.coordinator.planning import log_planned, replan_frozen, same_position
from app.coordinator.progress import ProgressLog, StoredBatch
from app.failures.error_text import describe
from app.failures.errors import CoordinatorNotStartedError, MissingBatchMetadataError
from app.failures.policy import FATAL, Decision, FailurePolicy
from app.metrics import METRICS, Metrics
from app.topology.batch import (
    Batch,
    BatchExecutor,
    BatchStatus,
    ChecksState,
    CommitStats,
    FindsBadRecords,
    RunsTopology,
    first_problem,
)
from app.topology.guarantees import check_combination
from spouts.metadata import BatchPlan
from spouts.planner import Caps, plan_batch
from spouts.protocols import PartitionedSpout, ReportsDataLoss, SpoutKind
from states.errors import LeaseLostError
from states.protocols import CoordinatorStore, LeaseInfo

log = logging.getLogger("app.coordinator")  # the name operators filter on (its package, as it was the module)

__all__ = ["FATAL", "Coordinator", "CoordinatorConfig", "Degraded"]

FaultHook = Callable[[str, int], None]


def _no_fault(point: str, txid: int) -> None:
    """No fault planted (tests plant them at the named points)."""


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """How the coordinator paces batches and holds its lease."""

    caps: Caps = field(default_factory=Caps)
    max_pending: int = 1  # txids processed at once; commits are still one at a time, in order
    retention: int = 16  # txids of metadata kept in the rotating state
    lease_ttl_s: float = 30.0
    owner: str = field(default_factory=unique_owner)  # unique per process: see app.coordinator.lease
    retry_backoff_s: tuple[float, float] = (0.05, 5.0)  # first and largest wait before replaying a failed txid
    idle_sleep_s: float = 0.5  # wait when there is nothing new to read
    outage_limit_s: float | None = 1800.0  # transient failures ridden out this long, then the pipeline stops
    accept_at_least_once: bool = False

    def __post_init__(self) -> None:
        for wrong, msg in ((self.max_pending < 1, "max_pending must be >= 1"),
                           (self.lease_ttl_s <= 0, "lease_ttl_s must be > 0"),
                           (self.retention < 2, "retention must be >= 2")):  # retention: the last and the next txid
            if wrong:
                raise ValueError(msg)


class Coordinator:
    """Drives one topology's batches against a spout, an executor and a transactional-state store."""

    def __init__(self, topology_id: str, spout: PartitionedSpout, executor: BatchExecutor, store: CoordinatorStore,
                 config: CoordinatorConfig | None = None, *, metrics: Metrics = METRICS,
                 faults: FaultHook | None = None, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, policy: FailurePolicy | None = None,
                 bad_records: BadRecordHandler | None = None) -> None:
        self.topology_id, self.spout, self.executor, self.store = topology_id, spout, executor, store
        self.config = config or CoordinatorConfig()
        self._metrics, self._faults, self._clock, self._wall_clock = metrics, faults or _no_fault, clock, wall_clock
        self.policy = policy or FailurePolicy(retry_backoff_s=self.config.retry_backoff_s,
                                              outage_limit_s=self.config.outage_limit_s)
        self._streak = FailureStreak(topology_id, self.policy, clock=clock, wall_clock=wall_clock)
        self._phases = PhaseTimer(topology_id, metrics, clock)
        for kind in executor.state_kinds():
            check_combination(spout.kind, kind, accept_at_least_once=self.config.accept_at_least_once)
        errors = executor.topology.errors if isinstance(executor, RunsTopology) else ErrorPolicy()
        self._bad_records = bad_records or handler_for(topology_id, errors, spout, metrics)  # settles each txid's
        self._partitions, self._emitter = spout.coordinator(), spout.emitter()
        self._pool = ThreadPoolExecutor(self.config.max_pending, thread_name_prefix=f"process-{topology_id}")
        self._inflight = InFlight()
        self._attempts: dict[int, int] = {}
        self._lease = LeaseHold(store, self.config.owner, self.config.lease_ttl_s, policy=self.policy,
                                metrics=metrics, clock=clock)
        self._log: ProgressLog | None = None
        self.committed_txid, self._state_checked = 0, False
        self.last_stats = CommitStats()
        self.stopped_by: Decision | None = None  # the permanent decision that stopped the pipeline

    @property
    def epoch(self) -> int | None:
        """The lease epoch this coordinator took (None before it took one)."""
        return self._lease.epoch

    @property
    def degraded(self) -> Degraded | None:
        """Set while failures repeat; cleared by a commit or an idle step."""
        return self._streak.degraded

    @property
    def _progress(self) -> ProgressLog:
        """The stored progress, readable once :meth:`start` took the lease."""
        if self._log is None:
            raise CoordinatorNotStartedError(self.topology_id)
        return self._log

    @property
    def holds_lease(self) -> bool:
        """Taken, and not lost as far as the heartbeat knows."""
        return self._lease.keeper is not None and self._lease.lost is None

    def _stop_with(self, decision: Decision) -> None:
        self.stopped_by = decision

    def start(self, stop: threading.Event | None = None, *,
              on_standby: Callable[[LeaseInfo | None], None] | None = None) -> bool:
        """Take the lease, start renewing it, and load where the topology stands. Without ``stop`` one attempt
        (LeaseHeldError when another owner holds it); with ``stop``, wait as a standby until the lease is free
        (:func:`app.coordinator.lease.take_lease`). False when ``stop`` was set while waiting."""
        keeper = self._lease.take(stop, on_standby=on_standby or _no_holder, on_permanent=self._stop_with,
                                  on_lost=self._cancel_running)
        if keeper is None:
            return False
        epoch = keeper.epoch
        self._log = ProgressLog(FencedStore(self.store, keeper), epoch=epoch, retention=self.config.retention)
        self.committed_txid = self._log.committed().txid
        self._metrics.committed_txid.labels(self.topology_id).set(self.committed_txid)
        log.info("pipeline %s: lease epoch %d, resuming after txid %d", self.topology_id, epoch,
                 self.committed_txid)
        return True

    def close(self, *, release: bool = True) -> None:
        """Stop processing, let the executor release what it holds, and release the lease so a successor
        can start at once."""
        ours = self._lease.stop_renewing()
        self._inflight.fail_all(self.executor, self.topology_id)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.executor.close()
        self._bad_records.close()
        self._partitions.close()
        self._emitter.close()
        if release and ours:
            self._lease.release()
        self._lease.lost_gauge()

    def run(self, stop: threading.Event | None = None, *, max_batches: int | None = None,
            until_idle: bool = False, callbacks: Callbacks = NO_CALLBACKS) -> int:
        """Commit batches until ``stop`` is set, ``max_batches`` committed, or (``until_idle``) nothing is new; the
        number committed. A failure the policy calls permanent propagates (:attr:`stopped_by` says why); anything
        else is retried with backoff (:func:`app.coordinator.loop.run_steps`, which tells ``callbacks`` about every step)."""
        if self._lease.epoch is None:
            self.start()
        return run_steps(self.step, stop or threading.Event(), idle_sleep_s=self.config.idle_sleep_s,
                         retry_backoff_s=self.config.retry_backoff_s, callbacks=callbacks,
                         max_batches=max_batches, until_idle=until_idle, clock=self._clock)

    def run_until_idle(self, max_batches: int | None = None) -> int:
        return self.run(max_batches=max_batches, until_idle=True)

    def step(self) -> Outcome:
        """Fill the pipeline, then finish the oldest txid."""
        self._lease.check()
        try:
            if not self._state_checked and isinstance(self.executor, ChecksState):  # a lost table: before any txid
                self.executor.check_state(self.committed_txid, self._log)
            self._state_checked = True
            self._fill()
            if not self._inflight:
                self._streak.healthy()
                return Outcome.IDLE
            self._finish(self._inflight[0])
        except Exception as e:
            lost = self._lease.lost
            if lost is not None:  # its work was cancelled: say why
                self._inflight.fail_all(self.executor, self.topology_id)
                raise lost from e
            decision, error = self._on_failure(e)
            if decision.permanent:
                if error is e:
                    raise
                raise error from e
            return Outcome.FAILED
        self._streak.healthy()
        return Outcome.COMMITTED

    def _fill(self) -> None:
        """Plan and start processing txids until ``max_pending`` are in flight."""
        while len(self._inflight) < self.config.max_pending:
            batch = self._plan(self._inflight[-1].txid + 1 if self._inflight else self.committed_txid + 1)
            if batch is None:
                return
            self._faults("process", batch.txid)
            batch.future = self._pool.submit(self._phases.timed, "process", batch.txid, self.executor.process, batch)
            self._inflight.append(batch)
            self._metrics.current_txid.labels(self.topology_id).set(batch.txid)

    def _plan(self, txid: int) -> Batch | None:
        """Step 1, or the frozen plan of a replay; None when there is nothing new to read.

        A replay of a frozen txid stores its next attempt number first (fenced), so the count
        survives a crash; before the freeze, attempts are counted in memory only.
        """
        stored = self._progress.batch(txid)
        if stored is not None:
            replay = StoredBatch(replan_frozen(self.topology_id, self._emitter, stored.plan), stored.attempt + 1)
            self._progress.store_batch(replay)
            log_planned(self.topology_id, replay.plan, replay.attempt)
            return self._new_batch(txid, replay.attempt, replay.plan, frozen=True)
        attempt = self._attempts.get(txid, 0) + 1
        self._faults("plan", txid)
        last = self._inflight[-1].plan if self._inflight else self._committed_plan()
        with self._phases.phase("plan", txid):
            plan = plan_batch(txid, self._partitions.partitions(), self._emitter, last, self.config.caps)
        if same_position(plan, last):
            return None
        log_planned(self.topology_id, plan, attempt)
        if self.spout.kind is SpoutKind.TRANSACTIONAL:
            self._freeze(txid, plan, attempt)
            return self._new_batch(txid, attempt, plan, frozen=True)
        return self._new_batch(txid, attempt, plan, frozen=False)

    def _new_batch(self, txid: int, attempt: int, plan: BatchPlan, *, frozen: bool) -> Batch:
        self._attempts[txid] = attempt
        if attempt > 1:
            self._metrics.replays.labels(self.topology_id).inc()
        return Batch(txid, attempt, plan, frozen, progress=self._progress)

    def _committed_plan(self) -> BatchPlan | None:
        stored = self._progress.batch(self.committed_txid)
        if stored is None and self.committed_txid > 0:
            raise MissingBatchMetadataError(self.committed_txid)
        return None if stored is None else stored.plan

    def _finish(self, batch: Batch) -> None:
        """Steps 2-4 for the oldest in-flight txid."""
        if batch.future is None:
            msg = f"txid {batch.txid} is finished before it was processed"
            raise RuntimeError(msg)
        batch.result = batch.future.result()  # step 2 ran in the pool
        batch.advance(BatchStatus.PROCESSED)
        if not batch.frozen:  # step 3
            self._freeze(batch.txid, batch.plan, batch.attempt)
            batch.frozen = True
        found = batch.result.bad_records if isinstance(batch.result, FindsBadRecords) else ()
        self._bad_records.settle(batch.txid, found, self._progress)
        self._faults("commit", batch.txid)  # step 4
        self._lease.check()
        stats = self._phases.timed("commit", batch.txid, self.executor.commit, batch, batch.result)
        self._mark_committed(batch)
        batch.advance(BatchStatus.COMMITTED)
        self._inflight.popleft()
        self.committed_txid, self.last_stats = batch.txid, stats
        self._attempts.pop(batch.txid, None)
        self._progress.rotate(batch.txid)
        self._after_commit(batch, stats)

    def _mark_committed(self, batch: Batch) -> None:
        self._faults("mark", batch.txid)
        self._progress.mark_committed(batch.txid, at=self._wall_clock())

    def _freeze(self, txid: int, plan: BatchPlan, attempt: int) -> None:
        self._faults("freeze", txid)
        with self._phases.phase("freeze", txid):
            self._progress.store_batch(StoredBatch(plan, attempt))

    def _after_commit(self, batch: Batch, stats: CommitStats) -> None:
        self._metrics.record_commit(self.topology_id, batch.txid, stats.records, stats.keys_updated)
        try:
            self._partitions.committed(batch.plan)
        except Exception as e:  # noqa: BLE001 - best effort: the positions are committed in the store
            log.warning("pipeline %s: could not publish the offsets of txid %d: %s", self.topology_id, batch.txid,
                        describe(e))

    def _on_failure(self, error: Exception) -> tuple[Decision, Exception]:
        """Ask the policy (through the failure streak); count the failure and fail every in-flight txid. Returns
        the decision and the error it was made on (the source's typed one, when the source named it)."""
        head = self._inflight[0] if self._inflight else None
        txid = head.txid if head is not None else self.committed_txid + 1
        error = self._streak.typed(error, self.spout, head, txid)
        if head is None:  # failed while planning: that was an attempt too
            self._attempts[txid] = self._attempts.get(txid, 0) + 1
        attempt = self._attempts.get(txid, 1) if head is None else head.attempt
        decision = self._streak.decide(error, txid, attempt, frozen_read=frozen_read_lost(head, error),
                                       kind=self.spout.kind)
        self._metrics.batches.labels(self.topology_id, "failed").inc()
        self._inflight.fail_all(self.executor, self.topology_id)
        if decision.permanent:
            self.stopped_by = decision
        return decision, error

    @property
    def source_problem(self) -> str | None:
        """What the spout's coordinator side reports as wrong with the source (e.g. a missing topic), or what
        holds the executor up (``isolating bad records in txid N: ...``, no Spark executor), if anything."""
        return first_problem(self._partitions, self.executor)

    @property
    def last_data_loss(self) -> str | None:
        """The last data loss the spout skipped under policy ``skip`` (what, where, when), if any: for /readyz."""
        return self._emitter.last_data_loss if isinstance(self._emitter, ReportsDataLoss) else None

    def _cancel_running(self, error: LeaseLostError) -> None:
        """Called by the heartbeat when the lease is lost: cancel the running work of every in-flight txid
        (the coordinator's thread then stops at its next lease check)."""
        self._lease.lost_gauge()
        self._inflight.cancel_running(self.executor)


def _no_holder(holder: LeaseInfo | None) -> None:
    """No standby callback: a standby waits without telling anyone."""
