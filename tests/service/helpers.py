"""Running the real service as a subprocess against a Kafka in the test process, with a ground truth.

* :class:`ServiceProcess`: ``python -m app run --config FILE`` in its own session (process group),
  so a SIGKILL of the group takes Spark's JVM and Python workers with it; SIGTERM goes to the
  service alone (as Kubernetes sends it to PID 1).
* :class:`SentenceProducer`: a thread producing sentences to the mock cluster and counting the
  words of every acknowledged one (the ground truth).
* :func:`word_counts`: the stored counts, read from the SQLite state with plain SQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Self, TypeVar

import yaml
from confluent_kafka import Producer

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
         "lima", "mike", "november", "oscar", "papa")


def free_port() -> int:
    """A free port below Linux's ephemeral range, so no client socket (Spark's, Kafka's) takes it meanwhile."""
    rng = random.Random()
    while True:
        port = rng.randint(20_000, 32_000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def word_count_config(path: Path, *, bootstrap: str, topic: str, port: int, state: dict[str, Any],
                      cassandra: dict[str, Any] | None = None, pipeline_id: str = "kill-test",
                      caps: tuple[int, int] = (400, 1600), max_pending: int = 2) -> Path:
    """A word-count config for the service under test (fast lease renewal, test-sized timeouts)."""
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout_s": 5, "read_timeout_s": 10},
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 4,
                                                  "spark.default.parallelism": 4}},
        "http": {"host": "127.0.0.1", "port": port},
        "service": {"shutdown_grace_s": 60, "ready_window_s": 60},
        "pipelines": [{
            "id": pipeline_id,
            "spout": {"topics": [topic], "first_poll": "earliest", "discovery_interval_s": 1,
                      "caps": {"per_partition": caps[0], "per_batch": caps[1]}},
            "transforms": [{"map": ["explode(split(CAST(value AS STRING), ' ')) AS word"]},
                           {"filter": "word <> ''"}],
            "group_by": ["word"],
            "aggregates": [{"count": {"as": "count"}}],
            "state": state,
            "max_pending": max_pending,
            "idle_sleep_s": 0.2,
        }],
    }
    if cassandra is not None:
        doc["cassandra"] = cassandra
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


class ServiceProcess:
    """One ``python -m app run`` process; its output goes to ``log`` (appended across restarts)."""

    def __init__(self, config: Path, log: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.config, self.log, self.port = config, log, port
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    def start(self) -> ServiceProcess:
        """Start the service; a previous run still alive is SIGKILLed first (two would share a port and a log)."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:  # noqa: PTH123  a plain open() of a log path
            out.write(f"\n==== start {time.strftime('%H:%M:%S')} ====\n".encode())
            out.flush()
            self.proc = subprocess.Popen([sys.executable, "-m", "app", "run", "--config", str(self.config)],
                                         cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        return self

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def readyz(self) -> tuple[int, dict[str, Any]]:
        status, body = self.get("/readyz")
        return status, json.loads(body)

    def wait_ready(self, timeout: float = 90.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                status, body = self.readyz()
                if status == 200:
                    return body
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"service not ready after {timeout}s; see {self.log}")

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"service exited with {self.proc.returncode}; log:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: the service, Spark's JVM and its Python workers."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def pause(self, timeout: float = 10.0) -> None:
        """SIGSTOP the whole process group and wait (``timeout`` at most) until each of its threads is stopped.

        A stopped group starts nothing new, but what it already handed on still lands: a request delivered to
        another process (a CQL server) is executed by it, and an SQLite commit whose commit frame is in the WAL
        but not yet in the shared wal-index is invisible to readers now and appears once the writer is dead
        (the next connection rebuilds the index from the WAL). PySpark's worker daemon puts itself and its
        Python workers in a process group of their own (``os.setpgid(0, 0)``): they are neither stopped nor
        killed with this group, and exit when the JVM's sockets close."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout  # SIGSTOP is delivered asynchronously (a thread in a syscall first
        while not group_stopped(self.proc.pid) and time.monotonic() < deadline:  # finishes it)
            time.sleep(0.001)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def terminate(self, timeout: float = 120.0) -> int:
        """SIGTERM the service process alone and wait for its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.cleanup()

    def run_to_exit(self, timeout: float) -> int:
        """Start the service and wait for it to stop on its own (a refusal, a permanent failure): its exit code.

        Whatever of the group is left is killed afterwards; a service still running after ``timeout``
        seconds fails the test with the tail of its log."""
        self.start()
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"service still running after {timeout}s; log:\n{self.tail()}") from None
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        """Kill whatever of the group is left (a JVM orphaned by a failed test)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def run_log(self) -> str:
        """What this run (since the last start) logged."""
        with open(self.log, "rb") as f:  # noqa: PTH123  a plain open() of a log path
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def commits_this_run(self) -> int:
        return len(re.findall(r"committed txid \d+:", self.run_log()))

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class SentenceProducer(threading.Thread):
    """Produces sentences of WORDS to ``topic`` until stopped; ``truth`` counts acknowledged words."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float = 400.0, seed: int = 1) -> None:
        super().__init__(name="producer", daemon=True)
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.rng = random.Random(seed)
        self.truth: Counter[str] = Counter()
        self.sent = self.acked = 0
        self.errors: list[Any] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})

    def run(self) -> None:
        while not self._stop_event.is_set():
            for _ in range(max(1, int(self.rate / 20))):
                self.produce_one()
            self._producer.poll(0)
            self._stop_event.wait(0.05)
        self._producer.flush(30)

    def produce_one(self) -> None:
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(1, 6))]
        self._producer.produce(self.topic, " ".join(words).encode(), partition=self.sent % self.partitions,
                               on_delivery=lambda err, msg, w=words: self._acked(err, w))  # type: ignore[misc]  # defaults bind this call's values
        self.sent += 1

    def _acked(self, err: Any, words: list[str]) -> None:
        with self._lock:
            if err is None:
                self.acked += 1
                self.truth.update(words)
            else:
                self.errors.append(err)

    def stop(self) -> Counter[str]:
        self._stop_event.set()
        if self.ident is not None:
            self.join(60)
        assert not self.errors, self.errors[:5]
        assert self._producer.flush(30) == 0
        assert self.acked == self.sent
        return Counter(self.truth)


def word_counts(db: Path, table: str = "word_counts") -> dict[str, int]:
    """The stored counts (an absent table is no counts yet)."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return {w: int(c) for w, c in conn.execute(f"SELECT word, count FROM {table}")}
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


def lease_row(db: Path, topology: str) -> tuple[str | None, int, float] | None:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute("SELECT owner, epoch, expires_at FROM trident_state_lease WHERE topology = ?",
                            (topology,)).fetchone()
    finally:
        conn.close()


def committed_txid(db: Path, topology: str) -> int:
    if not db.exists():
        return 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT value FROM trident_state WHERE topology = ? AND key = 'coordinator'",
                           (topology,)).fetchone()
        return 0 if row is None else int(json.loads(row[0])["committed_txid"])
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return 0
        raise
    finally:
        conn.close()


def state_documents(db: Path, topology: str) -> dict[str, str]:
    """The coordinator's documents (``coordinator``, ``batches/<txid>``) in the SQLite store, as JSON text."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return dict(conn.execute("SELECT key, value FROM trident_state WHERE topology = ? "
                                 "AND (key = 'coordinator' OR key LIKE 'batches/%')", (topology,)).fetchall())
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return {}
        raise
    finally:
        conn.close()


def _stat_fields(stat: Path) -> list[str]:
    """The fields of a ``/proc/.../stat`` file after the command name (state first), [] when it is gone."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def group_stopped(pgid: int) -> bool:
    """Whether every thread of every process in process group ``pgid`` is stopped (or dead)."""
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(proc / "stat")
        if len(fields) < 3 or int(fields[2]) != pgid:
            continue
        for task in (proc / "task").glob("[0-9]*"):
            state = (_stat_fields(task / "stat") or ["X"])[0]
            if state not in ("T", "t", "Z", "X"):
                return False
    return True


def sqlite_files(db: Path) -> tuple[Path, ...]:
    """An SQLite database in WAL mode and its two side files."""
    return db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")


def holders(files: Collection[Path]) -> dict[int, str]:
    """The processes other than this one that have any of ``files`` open: ``{pid: command line}``."""
    wanted = {str(f.resolve()) for f in files}
    found: dict[int, str] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            if any(str(fd.readlink()) in wanted for fd in (proc / "fd").iterdir()):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours
            continue
    return found


def settled(read: Callable[[], T], *, files: Collection[Path] = (), quiet_s: float = 1.0,
            timeout: float = 60.0) -> T:
    """What ``read()`` returns once a killed writer's last writes have landed, for reads taken after the SIGKILL.

    With ``files`` (an SQLite database's, :func:`sqlite_files`): first wait until no other process has them
    open (PySpark's Python workers outlive the group for a moment); the next connection then finds the WAL as
    the dead writer left it and every commit frame in it counts. Then read until two reads ``quiet_s`` apart
    agree: a request the dead process had delivered to a server in another process (the CQL test server
    executes it on its worker pool within milliseconds) has been executed by then."""
    deadline = time.monotonic() + timeout
    while found := holders(files):
        assert time.monotonic() < deadline, f"{files} still open after {timeout} s by {found}"
        time.sleep(0.05)
    last = read()
    while True:
        time.sleep(quiet_s)
        now = read()
        if now == last:
            return now
        assert time.monotonic() < deadline, f"the store still changing {timeout} s after the kill"
        last = now


def frozen_uncommitted(documents: dict[str, str]) -> int | None:
    """The txid whose plan is frozen (``batches/<txid>``) but not yet marked committed, if any."""
    doc = documents.get("coordinator")
    committed = 0 if doc is None else int(json.loads(doc)["committed_txid"])
    frozen = {int(k.rsplit("/", 1)[1]) for k in documents if k.startswith("batches/")}
    return committed + 1 if committed + 1 in frozen else None


class CqlServerProcess:
    """``python -m tests.cqlserver --port N`` in its own process: it outlives every killed service run."""

    def __init__(self, port: int, log: Path) -> None:
        self.port, self.log = port, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._cluster: Any = None
        self._session_: Any = None

    def __enter__(self) -> Self:
        out = open(self.log, "wb")  # noqa: PTH123  a plain open() of a log path
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.cqlserver", "--port", str(self.port)], cwd=ROOT,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while b"listening" not in self.log.read_bytes():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        if self._cluster is not None:
            self._cluster.shutdown()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def _session(self) -> Any:
        """One driver session for the test's reads, opened on first use and closed with the server."""
        from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
        from cassandra.policies import DCAwareRoundRobinPolicy

        if self._cluster is None:
            profile = ExecutionProfile(load_balancing_policy=DCAwareRoundRobinPolicy(local_dc="datacenter1"))
            self._cluster = Cluster(["127.0.0.1"], port=self.port, protocol_version=4,
                                    execution_profiles={EXEC_PROFILE_DEFAULT: profile})
            self._session_ = self._cluster.connect()
        return self._session_

    def word_counts(self, words: tuple[str, ...], keyspace: str = "trident",
                    table: str = "word_counts") -> dict[str, int]:
        """Stored counts of ``words`` (absent keys left out), read with the DataStax driver: the whole table, so that
        it reads every layout (a sharded table's key is found by its shard, or Cassandra 5.0's index)."""
        rows = self._session().execute(f"SELECT word, count FROM {keyspace}.{table}")
        return {r.word: int(r.count) for r in rows if r.word in words}

    def state_documents(self, topology: str, keyspace: str = "trident",
                        table: str = "trident_state") -> dict[str, str]:
        """The coordinator's documents (``coordinator``, ``batches/<txid>``) as JSON text (none before the table)."""
        from cassandra import InvalidRequest

        try:
            rows = self._session().execute(f"SELECT key, value FROM {keyspace}.{table} WHERE topology = %s",
                                           (topology,))
        except InvalidRequest:  # no such keyspace or table yet
            return {}
        return {r.key: r.value for r in rows
                if r.value is not None and (r.key == "coordinator" or r.key.startswith("batches/"))}
