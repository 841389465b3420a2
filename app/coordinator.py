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
pipeline is decided by :class:`app.failures.FailurePolicy`, never here. Transactional spouts freeze at plan time, so
their txids never change content. Every stored document goes through :mod:`app.progress`; the loop
that drives :meth:`Coordinator.step` is :mod:`app.loop`; docs/design.md walks one txid through it all.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from app.batch import (
    Batch,
    BatchExecutor,
    BatchStatus,
    ChecksState,
    CommitStats,
    FindsBadRecords,
    Reports,
    RunsTopology,
)
from app.error_policy import BadRecordHandler, ErrorPolicy, handler_for
from app.error_text import describe
from app.errors import MissingBatchMetadataError
from app.failures import FATAL, Decision, Failure, FailurePolicy
from app.guarantees import check_combination
from app.lease import LeaseKeeper, take_lease, unique_owner
from app.loop import NO_CALLBACKS, Callbacks, Outcome, run_steps
from app.metrics import METRICS, Metrics
from app.progress import ProgressLog, StoredBatch
from app.spark_errors import deterministic_spark_error, error_key
from spouts.errors import DataLossError, PartitionUnavailableError, SpoutError
from spouts.metadata import BatchPlan
from spouts.planner import Caps, plan_batch
from spouts.protocols import ArrowSpout, PartitionedSpout, ReportsDataLoss, SpoutKind
from spouts.typed_failures import typed_read_failure
from states.errors import LeaseLostError
from states.protocols import CoordinatorStore, Json, LeaseInfo

log = logging.getLogger(__name__)

__all__ = ["FATAL", "Coordinator", "CoordinatorConfig", "Degraded"]

FaultHook = Callable[[str, int], None]
SLOW_PHASE_S = 5.0  # a phase of a txid that takes this long or longer says so when it ends
P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """How the coordinator paces batches and holds its lease."""

    caps: Caps = field(default_factory=Caps)
    max_pending: int = 1  # txids processed at once; commits are still one at a time, in order
    retention: int = 16  # txids of metadata kept in the rotating state
    lease_ttl_s: float = 30.0
    owner: str = field(default_factory=unique_owner)  # unique per process: see app.lease
    retry_backoff_s: tuple[float, float] = (0.05, 5.0)  # first and largest wait before replaying a failed txid
    idle_sleep_s: float = 0.5  # wait when there is nothing new to read
    outage_limit_s: float | None = 1800.0  # transient failures ridden out this long, then the pipeline stops
    accept_at_least_once: bool = False

    def __post_init__(self) -> None:
        if self.max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        if self.lease_ttl_s <= 0:
            raise ValueError("lease_ttl_s must be > 0")
        if self.retention < 2:  # the last committed txid's metadata and the one being committed
            raise ValueError("retention must be >= 2")


@dataclass(frozen=True, slots=True)
class Degraded:
    """Why the pipeline is not making progress now, and since when (wall-clock seconds)."""

    reason: str
    since: float
    failures: int


class Coordinator:
    """Drives one topology's batches against a spout, an executor and a transactional-state store."""

    def __init__(self, topology_id: str, spout: PartitionedSpout, executor: BatchExecutor, store: CoordinatorStore,
                 config: CoordinatorConfig | None = None, *, metrics: Metrics = METRICS,
                 faults: FaultHook | None = None, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, policy: FailurePolicy | None = None,
                 bad_records: BadRecordHandler | None = None) -> None:
        self.topology_id, self.spout, self.executor, self.store = topology_id, spout, executor, store
        self.config = config or CoordinatorConfig()
        self._metrics, self._faults, self._clock = metrics, faults or (lambda point, txid: None), clock
        self._wall_clock = wall_clock
        self.policy = policy or FailurePolicy(retry_backoff_s=self.config.retry_backoff_s,
                                              outage_limit_s=self.config.outage_limit_s)
        for kind in executor.state_kinds():
            check_combination(spout.kind, kind, accept_at_least_once=self.config.accept_at_least_once)
        errors = executor.topology.errors if isinstance(executor, RunsTopology) else ErrorPolicy()
        self._bad_records = bad_records or handler_for(topology_id, errors, spout, metrics)  # settles each txid's
        self._partitions = spout.coordinator()
        self._emitter = spout.emitter()
        self._pool = ThreadPoolExecutor(self.config.max_pending, thread_name_prefix=f"process-{topology_id}")
        self._inflight: deque[Batch] = deque()
        self._attempts: dict[int, int] = {}
        self._epoch: int | None = None
        self._lease: LeaseKeeper | None = None
        self._progress: ProgressLog | None = None
        self.committed_txid = 0
        self._state_checked = False
        self.last_stats = CommitStats()
        self.degraded: Degraded | None = None  # set while failures repeat; cleared by a commit or an idle step
        self.stopped_by: Decision | None = None  # the permanent decision that stopped the pipeline
        self._failing_since: float | None = None  # monotonic
        self._same_error: tuple[int, str, int] = (0, "", 0)  # txid, error key, attempts failed alike
        self._asked: tuple[int, str] = (0, "")  # the txid and error the source was last asked about

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        """The lease epoch this coordinator took (None before it took one)."""
        return self._epoch

    @property
    def holds_lease(self) -> bool:
        """Taken, and not lost as far as the heartbeat knows."""
        return self._lease is not None and self._lease.lost is None

    def _stop_with(self, decision: Decision) -> None:
        self.stopped_by = decision

    def start(self, stop: threading.Event | None = None, *,
              on_standby: Callable[[LeaseInfo | None], None] = lambda info: None) -> bool:
        """Take the lease, start renewing it, and load where the topology stands.

        Without ``stop`` one attempt (LeaseHeldError when another owner holds it); with ``stop``,
        wait as a standby until the lease is free (:func:`app.lease.take_lease`). False when
        ``stop`` was set while waiting.
        """
        cfg = self.config
        self._metrics.lease_held.labels(self.topology_id).set(0)
        granted = take_lease(self.store, cfg.owner, cfg.lease_ttl_s, stop, on_standby=on_standby, policy=self.policy,
                           on_permanent=self._stop_with, clock=self._clock)
        if granted is None:
            return False
        epoch, asked_at = granted
        self._epoch = epoch
        self._lease = LeaseKeeper(self.store, cfg.owner, epoch, cfg.lease_ttl_s, renewed_at=asked_at,
                                  on_lost=self._cancel_running, clock=self._clock).start()
        self._progress = ProgressLog(_Fenced(self.store, self._lease), epoch=epoch, retention=cfg.retention)
        self.committed_txid = self._progress.committed().txid
        m = self._metrics
        m.lease_held.labels(self.topology_id).set(1)
        m.lease_epoch.labels(self.topology_id).set(self._epoch)
        m.committed_txid.labels(self.topology_id).set(self.committed_txid)
        log.info("pipeline %s: lease epoch %d, resuming after txid %d", self.topology_id, self._epoch,
                 self.committed_txid)
        return True

    def close(self, *, release: bool = True) -> None:
        """Stop processing, let the executor release what it holds, and release the lease so a successor
        can start at once."""
        lost = self._lease is not None and self._lease.lost is not None
        if self._lease is not None:
            self._lease.stop()
        self._fail_inflight()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.executor.close()
        self._bad_records.close()
        self._partitions.close()
        self._emitter.close()
        if release and self._epoch is not None and not lost:  # the release is conditional on owner and epoch anyway
            try:
                self.store.release_lease(self.config.owner, self._epoch)
            except Exception as e:
                log.warning("pipeline %s: could not release the lease: %s", self.topology_id, describe(e))
                log.debug("pipeline %s: releasing the lease failed", self.topology_id, exc_info=True)
        self._metrics.lease_held.labels(self.topology_id).set(0)

    def run(self, stop: threading.Event | None = None, *, max_batches: int | None = None,
            until_idle: bool = False, callbacks: Callbacks = NO_CALLBACKS) -> int:
        """Commit batches until ``stop`` is set, ``max_batches`` committed, or (``until_idle``) nothing is new.

        Returns the number of txids committed. A failure the policy calls permanent propagates (and
        :attr:`stopped_by` says why); anything else is retried with backoff
        (:func:`app.loop.run_steps`, which tells ``callbacks`` about every step).
        """
        if self._epoch is None:
            self.start()
        return run_steps(self.step, stop or threading.Event(), idle_sleep_s=self.config.idle_sleep_s,
                         retry_backoff_s=self.config.retry_backoff_s, callbacks=callbacks,
                         max_batches=max_batches, until_idle=until_idle, clock=self._clock)

    def run_until_idle(self, max_batches: int | None = None) -> int:
        return self.run(max_batches=max_batches, until_idle=True)

    # -- one step ---------------------------------------------------------------------------

    def step(self) -> Outcome:
        """Fill the pipeline, then finish the oldest txid."""
        self._check_lease()
        try:
            if not self._state_checked and isinstance(self.executor, ChecksState):  # a lost table: before any txid
                self.executor.check_state(self.committed_txid, self._progress)
            self._state_checked = True
            self._fill()
            if not self._inflight:
                self._healthy()
                return Outcome.IDLE
            self._finish(self._inflight[0])
        except Exception as e:
            if self._lease is not None and self._lease.lost is not None:  # its work was cancelled: say why
                self._fail_inflight()
                raise self._lease.lost from e
            decision, error = self._on_failure(e)
            if decision.permanent:
                if error is e:
                    raise
                raise error from e
            return Outcome.FAILED
        self._healthy()
        return Outcome.COMMITTED

    def _fill(self) -> None:
        """Plan and start processing txids until ``max_pending`` are in flight."""
        while len(self._inflight) < self.config.max_pending:
            batch = self._plan(self._inflight[-1].txid + 1 if self._inflight else self.committed_txid + 1)
            if batch is None:
                return
            self._faults("process", batch.txid)
            batch.future = self._pool.submit(self._timed, "process", batch.txid, self.executor.process, batch)
            self._inflight.append(batch)
            self._metrics.current_txid.labels(self.topology_id).set(batch.txid)

    def _plan(self, txid: int) -> Batch | None:
        """Step 1, or the frozen plan of a replay; None when there is nothing new to read.

        A replay of a frozen txid stores its next attempt number first (fenced), so the count
        survives a crash; before the freeze, attempts are counted in memory only.
        """
        assert self._progress is not None
        stored = self._progress.batch(txid)
        if stored is not None:
            replay = StoredBatch(self._replan_frozen(stored.plan), stored.attempt + 1)
            self._progress.store_batch(replay)
            self._planned(replay.plan, replay.attempt)
            return self._new_batch(txid, replay.attempt, replay.plan, frozen=True)
        attempt = self._attempts.get(txid, 0) + 1
        self._faults("plan", txid)
        last = self._inflight[-1].plan if self._inflight else self._committed_plan()
        with self._phase("plan", txid):
            plan = plan_batch(txid, self._partitions.partitions(), self._emitter, last, self.config.caps)
        if _same_position(plan, last):
            return None
        self._planned(plan, attempt)
        if self.spout.kind is SpoutKind.TRANSACTIONAL:
            self._freeze(txid, plan, attempt)
            return self._new_batch(txid, attempt, plan, frozen=True)
        return self._new_batch(txid, attempt, plan, frozen=False)

    def _planned(self, plan: BatchPlan, attempt: int) -> None:
        """The txid's line as it is planned: records and partitions (a replay: its first one at INFO, later at
        DEBUG, each failure having its own line)."""
        read = sum(1 for m in plan.partitions.values() if m.next_offset > m.first_offset)
        replay = f" (attempt {attempt}, its frozen plan)" if attempt > 1 else ""
        log.log(logging.DEBUG if attempt > 2 else logging.INFO, "pipeline %s txid %d: planned %d records from %d of "
                "%d partitions%s", self.topology_id, plan.txid, plan.offset_count, read, len(plan.partitions), replay)

    def _replan_frozen(self, plan: BatchPlan) -> BatchPlan:
        """``plan``, unless retention removed offsets of it: then policy fail raises DataLossError and
        skip keeps what is left (stored, fenced, before the replay reads it)."""
        checked = {p: self._emitter.replan_frozen(m) for p, m in plan.partitions.items()}
        if checked == dict(plan.partitions):
            return plan
        lost = plan.offset_count - sum(m.next_offset - m.first_offset for m in checked.values())
        log.warning("pipeline %s: retention removed %d offsets of frozen txid %d before it committed; replaying "
                    "what is left (the lost records are counted once, if an earlier attempt wrote them, or not "
                    "at all)", self.topology_id, lost, plan.txid)
        return BatchPlan(plan.txid, checked)

    def _new_batch(self, txid: int, attempt: int, plan: BatchPlan, *, frozen: bool) -> Batch:
        self._attempts[txid] = attempt
        if attempt > 1:
            self._metrics.replays.labels(self.topology_id).inc()
        return Batch(txid, attempt, plan, frozen, progress=self._progress)

    def _committed_plan(self) -> BatchPlan | None:
        assert self._progress is not None
        stored = self._progress.batch(self.committed_txid)
        if stored is None and self.committed_txid > 0:
            raise MissingBatchMetadataError(self.committed_txid)
        return None if stored is None else stored.plan

    def _finish(self, batch: Batch) -> None:
        """Steps 2-4 for the oldest in-flight txid."""
        assert batch.future is not None and self._progress is not None
        batch.result = batch.future.result()  # step 2 ran in the pool
        batch.advance(BatchStatus.PROCESSED)
        if not batch.frozen:  # step 3
            self._freeze(batch.txid, batch.plan, batch.attempt)
            batch.frozen = True
        found = batch.result.bad_records if isinstance(batch.result, FindsBadRecords) else ()
        self._bad_records.settle(batch.txid, found, self._progress)
        self._faults("commit", batch.txid)  # step 4
        self._check_lease()
        stats = self._timed("commit", batch.txid, self.executor.commit, batch, batch.result)
        self._mark_committed(batch)
        batch.advance(BatchStatus.COMMITTED)
        self._inflight.popleft()
        self.committed_txid, self.last_stats = batch.txid, stats
        self._attempts.pop(batch.txid, None)
        self._progress.rotate(batch.txid)
        self._after_commit(batch, stats)

    def _mark_committed(self, batch: Batch) -> None:
        assert self._progress is not None
        self._faults("mark", batch.txid)
        self._progress.mark_committed(batch.txid, at=self._wall_clock())

    def _freeze(self, txid: int, plan: BatchPlan, attempt: int) -> None:
        assert self._progress is not None
        self._faults("freeze", txid)
        with self._phase("freeze", txid):
            self._progress.store_batch(StoredBatch(plan, attempt))

    def _after_commit(self, batch: Batch, stats: CommitStats) -> None:
        m, t = self._metrics, self.topology_id
        m.batches.labels(t, "committed").inc()
        m.committed_txid.labels(t).set(batch.txid)
        m.records.labels(t).inc(stats.records)
        m.keys_updated.labels(t).inc(stats.keys_updated)
        try:
            self._partitions.committed(batch.plan)
        except Exception as e:  # noqa: BLE001 - best effort: the positions are committed in the store
            log.warning("pipeline %s: could not publish the offsets of txid %d: %s", self.topology_id, batch.txid,
                        describe(e))

    # -- failures, lease, timing ------------------------------------------------------------

    def _on_failure(self, error: Exception) -> tuple[Decision, Exception]:
        """Ask the policy; count, log and remember the decision; fail every in-flight txid. Returns the decision
        and the error it was made on (the source's typed one, when the source named it)."""
        head = self._inflight[0] if self._inflight else None
        txid = head.txid if head is not None else self.committed_txid + 1
        if head is not None and self._asked != (txid, error_key(error)):  # once per txid and error
            self._asked = (txid, error_key(error))
            error = self._typed_read_error(error, head)
        if head is None:  # failed while planning: that was an attempt too
            self._attempts[txid] = self._attempts.get(txid, 0) + 1
        attempt = self._attempts.get(txid, 1) if head is None else head.attempt
        now = self._clock()
        if self._failing_since is None:
            self._failing_since = now
        key = error_key(error)
        same = self._same_error[2] + 1 if self._same_error[:2] == (txid, key) else 1
        self._same_error = (txid, key, same)
        failures = 1 if self.degraded is None else self.degraded.failures + 1
        frozen_read = head is not None and head.frozen and isinstance(error, DataLossError)
        decision = self.policy.decide(Failure(error, txid, attempt, failures, now - self._failing_since, same,
                                              frozen_read=frozen_read))
        self._metrics.batches.labels(self.topology_id, "failed").inc()
        self._fail_inflight()
        if decision.permanent:
            self.stopped_by = decision
            log.error("pipeline %s: txid %d attempt %d failed permanently (%s); stopping", self.topology_id, txid,
                      attempt, decision.reason)
            return decision, error
        since = self._wall_clock() if self.degraded is None else self.degraded.since
        reason = decision.reason
        if self.spout.kind is SpoutKind.TRANSACTIONAL and isinstance(error, PartitionUnavailableError):
            reason = f"transactional spout stalled: txid {txid} keeps its ranges and waits ({reason})"
            log.warning("pipeline %s: %s", self.topology_id, reason)
        self.degraded = Degraded(reason, since, failures)
        log.warning("pipeline %s: txid %d attempt %d failed (%s); replaying it and every later txid in %.2f s "
                    "(failure %d in a row)", self.topology_id, txid, attempt, describe(error), decision.retry_in_s,
                    failures)
        return decision, error

    def _typed_read_error(self, error: Exception, batch: Batch) -> Exception:
        """For a failure that reached the driver only as a Spark task's text, the typed error the source raises
        here when one range of each of ``batch``'s topics is read (:mod:`spouts.typed_failures`); else ``error``."""
        if isinstance(error, (SpoutError, *FATAL)) or deterministic_spark_error(error) is not None \
                or not isinstance(self.spout, ArrowSpout):
            return error
        typed = typed_read_failure(self.spout, batch.plan)
        if typed is None:
            return error
        log.warning("pipeline %s: txid %d failed (%s, its text only); reading its ranges here: %s",
                    self.topology_id, batch.txid, type(error).__name__, typed)
        return typed

    @property
    def source_problem(self) -> str | None:
        """What the spout's coordinator side reports as wrong with the source (e.g. a missing topic), or what
        holds the executor up (``isolating bad records in txid N: ...``, no Spark executor), if anything."""
        for part in (self._partitions, self.executor):
            if isinstance(part, Reports) and isinstance(part.problem, str):
                return part.problem
        return None

    @property
    def last_data_loss(self) -> str | None:
        """The last data loss the spout skipped under policy ``skip`` (what, where, when), if any: for /readyz."""
        return self._emitter.last_data_loss if isinstance(self._emitter, ReportsDataLoss) else None

    def _healthy(self) -> None:
        if self.degraded is not None:
            log.info("pipeline %s: healthy again after %d failures", self.topology_id, self.degraded.failures)
        self.degraded, self._failing_since = None, None

    def _fail_inflight(self) -> None:
        """A failure of txid N fails every later in-flight txid too; their running work is cancelled."""
        while self._inflight:
            b = self._inflight.pop()
            if b.future is not None and not b.future.cancel() and not b.future.done():
                try:
                    self.executor.cancel(b.txid)
                except Exception as e:  # noqa: BLE001 - best effort: the txid fails anyway
                    log.warning("pipeline %s: could not cancel the work of txid %d: %s", self.topology_id, b.txid,
                                describe(e))
            if b.status is not BatchStatus.COMMITTED:
                b.advance(BatchStatus.FAILED)

    def _check_lease(self) -> None:
        """Stop (LeaseLostError, saying why) if the heartbeat lost the lease or could not renew it in time."""
        assert self._lease is not None, "start() takes the lease first"
        try:
            self._lease.check()
        except LeaseLostError:
            self._metrics.lease_held.labels(self.topology_id).set(0)
            raise

    def _cancel_running(self, error: LeaseLostError) -> None:
        """Called by the heartbeat when the lease is lost: cancel the running work of every in-flight txid
        (the coordinator's thread then stops at its next lease check)."""
        self._metrics.lease_held.labels(self.topology_id).set(0)
        for b in list(self._inflight):
            if b.future is not None and not b.future.done():
                self.executor.cancel(b.txid)

    @contextmanager
    def _phase(self, name: str, txid: int) -> Iterator[None]:
        """Time one phase of ``txid`` into ``trident_phase_seconds``; one that took :data:`SLOW_PHASE_S` or longer
        says so as it ends (a failed one has its failure's line instead)."""
        began = self._clock()
        with self._metrics.phase_seconds.labels(self.topology_id, name).time():
            yield
        took = self._clock() - began
        if took >= SLOW_PHASE_S:
            log.info("pipeline %s txid %d: %s took %.1f s", self.topology_id, txid, name, took)

    def _timed(self, name: str, txid: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with self._phase(name, txid):
            return fn(*args, **kwargs)


def _same_position(plan: BatchPlan, last: BatchPlan | None) -> bool:
    """True when ``plan`` reads nothing and changes no partition's position: nothing to commit."""
    if plan.offset_count:
        return False
    before = {} if last is None else {p: m.next_offset for p, m in last.partitions.items()}
    return {p: m.next_offset for p, m in plan.partitions.items()} == before


class _Fenced:
    """The coordinator's view of its store: every fenced write checks the heartbeat's verdict first,
    so nothing is written once the lease counts as lost (the store's epoch check stays the real fence)."""

    def __init__(self, store: CoordinatorStore, lease: LeaseKeeper) -> None:
        self._store, self._lease, self.topology_id = store, lease, store.topology_id

    def get(self, key: str) -> Json | None:
        return self._store.get(key)

    def keys(self, prefix: str) -> list[str]:
        return self._store.keys(prefix)

    def put(self, key: str, value: Json, *, epoch: int) -> None:
        self._lease.check()
        self._store.put(key, value, epoch=epoch)

    def delete(self, keys: Sequence[str], *, epoch: int) -> None:
        self._lease.check()
        self._store.delete(keys, epoch=epoch)
