"""The commit path on a Spark standalone cluster: failed LWTs and reads when commit partitions move.

    python -m tests.bench commit-cluster [--keys 20000] [--rounds 10] [--workers 2] [--split 0]

The word-count service of :mod:`tests.bench.spark_commit` (every txid updates the same keys once)
runs with ``spark.master`` a standalone master and ``workers`` 1-core workers on loopback
(:mod:`tests.sparkcluster`), into Cassandra (``CASSANDRA_CONTACT_POINTS``, else the CQL test
server). A round of every key is produced only once the previous one is committed, so nothing else
runs between rounds. With ``--split N`` each round is produced in two parts, its first ``N``
records committed before the rest is produced: txids then do not line up with the key set (as in
a live stream), and each commit partition runs twice per round. Spark picks the executor of each commit partition txid by txid; a thread
watches the partitions' cache files in the executors' own work directories (each file names the
txid it was saved after, and the keys it held), which tells, for each txid, the keys committed on
another executor than their previous commit (the moved keys: each should cost one read, never a
failed LWT) and the commit partitions that ran on another executor than their previous commit.

Prints per round the keys written, LWTs, failed LWTs (compare-and-set conflicts), reads (the
coordinator's own few per txid included) and moved keys; then the steady state (every round after
the first) against the goal: failed LWTs <= 1 % of key writes, reads <= 1.2 per moved key; and the
machine load sampled during the run.
"""

from __future__ import annotations

import argparse
import os
import pickle
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from states.cassandra import CassandraSettings
from tests.bench.commit_path import cassandra, load
from tests.bench.spark_commit import ServiceCommit
from tests.service.helpers import ROOT
from tests.sparkcluster import SparkCluster

GOAL_FAILED_LWTS = 0.01  # failed LWTs per key write at steady state
GOAL_READS_PER_MOVED_KEY = 1.2


@dataclass(frozen=True)
class Saved:
    """One cache file as the watch saw it: the commit partition (count, index), txid, executor and keys."""

    partitions: int
    partition: int
    txid: int
    executor: str  # the executor's work directory (worker-N/app/executor id)
    keys: frozenset[Any]  # the keys its cache held: those committed in that txid and those it kept from before


class CacheFileWatch:
    """Polls the commit partitions' cache files under ``root`` (every executor's work directory) and keeps
    each file's (partition, txid) once: where each partition's commit of each txid ran."""

    def __init__(self, root: Path, interval_s: float = 0.05) -> None:
        self.root, self.interval_s = root, interval_s
        self.saved: dict[tuple[int, int, int], Saved] = {}  # (partitions, partition, txid) -> where
        self._mtimes: dict[Path, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cache-file-watch", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        for path in self.root.rglob("trident-commit-caches/*.pickle"):
            try:
                mtime = path.stat().st_mtime_ns
                if self._mtimes.get(path) == mtime:
                    continue
                with path.open("rb") as f:
                    txid, entries, _ = pickle.load(f)  # (txid, entries, estimate of absent misses)
            except (OSError, EOFError, pickle.UnpicklingError):  # replaced meanwhile: read it next time
                continue
            self._mtimes[path] = mtime
            partitions, partition = (int(n) for n in path.stem.rsplit("-", 2)[1:])
            executor = str(path.parent.parent.relative_to(self.root))
            self.saved.setdefault((partitions, partition, txid),
                                  Saved(partitions, partition, txid, executor, frozenset(k for k, _ in entries)))

    def moved_keys(self, after_txid: int, through_txid: int) -> tuple[int, int]:
        """Keys committed in the txids in (``after_txid``, ``through_txid``] on another executor than the one that
        held them last (their previous commit), and the commit partitions that ran on another executor than
        their previous commit. A cache file holds the keys its txid committed and those it kept from the same
        executor's previous file, so the executor of the latest earlier file holding a key is where it was
        committed last."""
        held: dict[Any, str] = {}  # key -> executor of the latest file holding it
        last_run: dict[tuple[int, int], str] = {}  # commit partition -> executor of its latest file
        keys = parts = 0
        for s in sorted(self.saved.values(), key=lambda s: s.txid):
            if s.txid > through_txid:
                break
            if s.txid > after_txid:
                keys += sum(1 for k in s.keys if held.get(k, s.executor) != s.executor)
                parts += last_run.get((s.partitions, s.partition), s.executor) != s.executor
            held.update(dict.fromkeys(s.keys, s.executor))
            last_run[(s.partitions, s.partition)] = s.executor
        return keys, parts

    @property
    def executors(self) -> set[str]:
        return {s.executor for s in self.saved.values()}


@dataclass(frozen=True)
class Round:
    """One round of every key: txids, keys written, LWTs, failed LWTs, reads, moved keys and partitions."""

    txids: int
    keys: int
    lwts: int
    failed_lwts: int
    reads: int
    moved_keys: int
    moved_partitions: int
    commit_s: float

    @classmethod
    def between(cls, before: dict[str, float], after: dict[str, float], watch: CacheFileWatch) -> Round:
        d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("keys", "cas", "conflicts", "read", "commit_s")}
        moved, parts = watch.moved_keys(int(before.get("committed_txid", 0)), int(after["committed_txid"]))
        return cls(int(after["committed_txid"] - before.get("committed_txid", 0)), int(d["keys"]), int(d["cas"]),
                   int(d["conflicts"]), int(d["read"]), moved, parts, d["commit_s"])


def run(settings: CassandraSettings, keys: int, rounds: int, workers: int, workdir: Path, split: int = 0,
        ) -> list[Round]:
    """``rounds`` rounds of ``keys`` keys through the service on a ``workers`` x 1-core standalone cluster; with
    ``split`` each round's first ``split`` records are committed before the rest is produced."""
    if not 0 <= split < keys:
        raise ValueError("split must be >= 0 and < keys")
    from spouts.kafka.mock_cluster import MockKafkaCluster

    out: list[Round] = []
    with MockKafkaCluster(3) as kafka, SparkCluster(workdir / "spark", workers=workers, cores=1) as cluster:
        spark = {"master": cluster.master_url, "conf": {"spark.executorEnv.PYTHONPATH": str(ROOT),
                                                        "spark.executor.memory": "512m"}}
        commit = ServiceCommit(kafka, settings, keys, workdir, max_pending=1, spark=spark,
                               env={"SPARK_LOCAL_IP": "127.0.0.1"})
        try:
            with CacheFileWatch(cluster.root) as watch:
                before: dict[str, float] = {}
                commit.service.start()
                for r in range(1, rounds + 1):
                    if split:
                        commit.produce(0, records=split)
                        commit.wait_committed((r - 1) * keys + split, counter="keys")
                    commit.produce(0, records=keys - split)
                    after = commit.wait_committed(r * keys, counter="keys")
                    watch.poll()
                    out.append(Round.between(before, after, watch))
                    print(f"  round {r}: {out[-1]}; {load()}", flush=True)
                    before = after
            print(f"  executors seen: {sorted(watch.executors)}")
            assert commit.service.terminate() == 0
        finally:
            commit.service.cleanup()
    return out


def main(argv: list[str] | None = None) -> list[Round]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=20_000, help="keys per round (a multiple of 4)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of every key (the first: new keys)")
    parser.add_argument("--workers", type=int, default=2, help="1-core workers of the standalone cluster")
    parser.add_argument("--window", type=int, default=64, help="requests in flight (max_concurrency)")
    parser.add_argument("--split", type=int, default=0,
                        help="records of each round committed before the rest is produced (0: whole rounds)")
    args = parser.parse_args(argv)
    print(f"{load()}; peer: {os.environ.get('CASSANDRA_CONTACT_POINTS') or 'CQL test server'}; {args.keys} keys, "
          f"{args.rounds} rounds, {args.workers} x 1-core workers, split {args.split}", flush=True)
    with cassandra() as base, tempfile.TemporaryDirectory(prefix="bench-commit-cluster-") as workdir:
        settings = CassandraSettings(**{**{f: getattr(base, f) for f in ("contact_points", "port", "local_dc")},
                                        "keyspace": "bench", "max_concurrency": args.window,
                                        "shards": 0})  # the LWT-per-key path
        rounds = run(settings, args.keys, args.rounds, args.workers, Path(workdir), args.split)
    report(rounds)
    print(load())
    return rounds


def report(rounds: list[Round]) -> dict[str, Any]:
    """The steady state (every round after the first) against the goal; printed and returned."""
    print(f"  {'round':<6} {'txids':>5} {'keys':>8} {'LWTs':>8} {'failed':>7} {'reads':>7} {'moved keys':>10} "
          f"{'moved parts':>11} {'commit s':>8}")
    for i, r in enumerate(rounds, 1):
        print(f"  {i:<6} {r.txids:>5} {r.keys:>8} {r.lwts:>8} {r.failed_lwts:>7} {r.reads:>7} {r.moved_keys:>10} "
              f"{r.moved_partitions:>11} {r.commit_s:>8.1f}")
    steady = rounds[1:]
    keys = sum(r.keys for r in steady)
    failed = sum(r.failed_lwts for r in steady)
    reads = sum(r.reads for r in steady)
    moved = sum(r.moved_keys for r in steady)
    figures = {"key_writes": keys, "failed_lwts": failed, "failed_per_write": failed / keys if keys else 0.0,
               "reads": reads, "moved_keys": moved, "reads_per_moved_key": reads / moved if moved else None}
    per_moved = "n/a (no key moved)" if moved == 0 else f"{reads / moved:.2f}"
    print(f"steady state ({len(steady)} rounds): {keys} key writes, {failed} failed LWTs "
          f"({figures['failed_per_write']:.2%}; goal <= {GOAL_FAILED_LWTS:.0%}); {reads} reads for {moved} moved keys "
          f"({per_moved} per moved key; goal <= {GOAL_READS_PER_MOVED_KEY})")
    return figures
