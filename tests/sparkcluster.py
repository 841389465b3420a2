"""A Spark standalone cluster on loopback for the tests: a master and workers from the installed PySpark.

    with SparkCluster(tmp_path / "spark", workers=2) as cluster:
        config["spark"]["master"] = cluster.master_url        # spark://127.0.0.1:<port>
        cluster.kill_executor()                               # SIGKILL one executor JVM
        cluster.kill_worker(0); cluster.start_worker(0)       # a worker (and its executors) lost, then back

Each daemon is ``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}``
(SPARK_HOME: the ``pyspark`` package directory) in a process group of its own, on 127.0.0.1 with
free ports (``SPARK_LOCAL_IP=127.0.0.1``), each worker with its own work directory; executors are
children of their worker and share its group. Everything is stopped on exit, on an error and at
interpreter exit (atexit), by process group.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.service.helpers import free_port

EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"


def spark_home() -> Path:
    """The installed PySpark's own Spark distribution (its ``bin`` and ``jars``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class SparkCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores each, under ``root``."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.root, self.cores, self.memory = root, cores, memory
        self.master_port, self.master_ui = free_port(), free_port()
        self.worker_ports = [free_port() for _ in range(workers)]
        self.worker_uis = [free_port() for _ in range(workers)]
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes] | None] = [None] * workers
        self.env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_NO_DAEMONIZE": "1"}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> Self:
        """Start the master, then every worker; return once each worker has registered with the master."""
        atexit.register(self.stop)
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.master = self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                      "--port", str(self.master_port), "--webui-port", str(self.master_ui))
            self._wait_for(self.root / "master.log", "I have been elected leader", self.master)
            for i in range(len(self.workers)):
                self.start_worker(i)
        except BaseException:
            self.stop()
            raise
        return self

    def start_worker(self, i: int, timeout: float = 60.0) -> None:
        """Start worker ``i`` (again) with its own work directory; wait until the master has it."""
        log = self.root / f"worker-{i}.log"
        offset = log.stat().st_size if log.exists() else 0
        work = self.root / f"work-{i}"
        work.mkdir(exist_ok=True)
        self.workers[i] = self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                      "--port", str(self.worker_ports[i]), "--webui-port", str(self.worker_uis[i]),
                                      "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work),
                                      self.master_url)
        self._wait_for(log, "Successfully registered with master", self.workers[i], offset, timeout)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i``'s process group: the worker JVM and the executors it launched (a lost machine)."""
        proc = self.workers[i]
        if proc is not None:
            _kill_group(proc)
            self.workers[i] = None

    def executor_pids(self) -> list[int]:
        """The executor JVMs this cluster's workers launched (found by their command line)."""
        urls = tuple(f"Worker@127.0.0.1:{p}" for p in self.worker_ports)
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:  # exited meanwhile
                continue
            if EXECUTOR_CLASS in cmdline and any(u in cmdline for u in urls):
                pids.append(int(entry.name))
        return sorted(pids)

    def kill_executor(self) -> int:
        """SIGKILL one running executor JVM (its worker launches a new one); returns its pid."""
        pids = self.executor_pids()
        if not pids:
            raise AssertionError(f"no executor of {self.master_url} is running")
        os.kill(pids[0], signal.SIGKILL)
        return pids[0]

    def wait_for_executors(self, n: int, timeout: float = 120.0) -> None:
        """Wait until ``n`` executor JVMs run (a driver has connected and the workers launched them)."""
        deadline = time.monotonic() + timeout
        while len(self.executor_pids()) < n:
            assert time.monotonic() < deadline, f"fewer than {n} executors after {timeout} s: {self.logs()}"
            time.sleep(0.2)

    def stop(self) -> None:
        """Kill every worker (with its executors) and the master; safe to call more than once."""
        for i in range(len(self.workers)):
            self.kill_worker(i)
        if self.master is not None:
            _kill_group(self.master)
            self.master = None
        atexit.unregister(self.stop)

    def logs(self, lines: int = 30) -> str:
        """The end of every daemon's log, for a failure message."""
        out = []
        for log in sorted(self.root.glob("*.log")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))  # noqa: PERF401  a loop reads clearer here
        return "\n".join(out)

    def _spawn(self, name: str, main_class: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as out:  # noqa: PTH123  a plain open() of a log path
            return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), main_class, *args], cwd=self.root,
                                    env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _wait_for(self, log: Path, line: str, proc: subprocess.Popen[bytes] | None, offset: int = 0,
                  timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
            if re.search(re.escape(line), text):
                return
            if proc is None or proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{log.name}: no {line!r} within {timeout} s\n{self.logs()}")
            time.sleep(0.2)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(30)
