"""Real Apache Kafka, Apache Cassandra and a Confluent-API Schema Registry on loopback, as test peers.

The servers come from a *realstack* folder (start.sh, stop.sh) that a CI machine or a contributor keeps
beside the clone or names with ``REALSTACK_DIR``; they are not part of the product. Beside the clone,
``shared/realstack-next`` (Kafka 4.4, Cassandra 5.0) is preferred and ``shared/realstack`` (Kafka 3.3.1,
Cassandra 4.0.14) is the fallback, taken with a line on stderr, never silently. This module only drives
them: an instance with its own data directory and free ports, SIGKILL and restart of one server (the chaos
suite's process faults), and stop-and-wipe.

``python3 -m tests.realstack run -- CMD...`` starts an instance, runs CMD with the real-peer variables
(``KAFKA_BOOTSTRAP_SERVERS``, ``CASSANDRA_CONTACT_POINTS``, ``CASSANDRA_PORT``, ``SCHEMA_REGISTRY_URL``),
``REQUIRE_REAL_PEERS=1`` and ``REALSTACK_DIR`` (the folder that started, for tests that start instances of
their own), and stops and wipes it whatever happened. ``python3 -m tests.realstack where`` prints the
folder (exit 1 when there is none). Standard library only: it runs before the project's virtualenv exists.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVERS = ("kafka", "cassandra", "registry")


# The servers the suite runs on, newest first: Kafka 4.4 / Cassandra 5.0, then Kafka 3.3.1 / Cassandra 4.0.14
# (the compatibility lane names the older one with REALSTACK_DIR).
DEFAULT_FOLDERS = ("realstack-next", "realstack")


def usable(candidate: Path) -> bool:
    """A folder with the start.sh/stop.sh interface, both executable."""
    return all(os.access(candidate / script, os.X_OK) for script in ("start.sh", "stop.sh"))


def candidates() -> list[Path]:
    """The folders to try, in order: ``REALSTACK_DIR`` alone when set, else the defaults beside the clone."""
    named = os.environ.get("REALSTACK_DIR")
    return [Path(named)] if named else [beside(name) for name in DEFAULT_FOLDERS]


def beside(name: str) -> Path:
    """The default folder ``name`` (one of :data:`DEFAULT_FOLDERS`) beside the clone."""
    return ROOT.parent / "shared" / name


def find() -> Path | None:
    """The first usable realstack folder of :func:`candidates`; None if there is none. Passing over the
    newest default for an older one is said on stderr, never done silently."""
    tried: list[Path] = []
    for candidate in candidates():
        if usable(candidate):
            if tried:
                print(f"realstack: {tried[0]} is missing or unusable; falling back to {candidate}",
                      file=sys.stderr, flush=True)
            return candidate.resolve()
        tried.append(candidate)
    return None


def fallback(home: Path) -> Path | None:
    """The next usable default after ``home`` (whose servers did not start); None when a folder was named."""
    if os.environ.get("REALSTACK_DIR"):
        return None
    later = list(itertools.dropwhile(lambda c: c.resolve() != home, candidates()))[1:]
    return next((c.resolve() for c in later if usable(c)), None)


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(seed: int | None = None) -> dict[str, int]:
    """Ports for one instance, each of its derived ports free too (Cassandra's storage and JMX ports
    follow its CQL port, Kafka's controller port follows the broker's)."""
    base = 20000 + (os.getpid() * 7 + (seed or int(time.time()))) % 20000
    for step in range(400):
        kafka = 20000 + (base + step * 97) % 20000
        cassandra = kafka + 2  # storage cassandra-2042 (and +1 for TLS), JMX cassandra-1843
        registry = kafka + 4
        wanted = [kafka, kafka + 1, cassandra, cassandra - 2042, cassandra - 2041, cassandra - 1843, registry]
        if all(_free(p) for p in wanted):
            return {"KAFKA_PORT": kafka, "CASSANDRA_PORT": cassandra, "REGISTRY_PORT": registry}
    raise RuntimeError("no free ports for a realstack instance")


class RealStack:
    """One instance of the three servers, its state in ``data`` (wiped by :meth:`stop`)."""

    def __init__(self, home: Path, data: Path, ports: dict[str, int] | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.home, self.data = home, data
        self.ports = ports or free_ports()
        self.env = {**os.environ, "REALSTACK_DATA": str(data), **{k: str(v) for k, v in self.ports.items()},
                    **(extra_env or {})}
        self.exports: dict[str, str] = {}

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, what: str = "all") -> dict[str, str]:
        """Start ``what`` (all, or one server) and wait until it accepts connections; the exports."""
        out = subprocess.run([str(self.home / "start.sh"), what, "--env"], env=self.env, stdout=subprocess.PIPE,
                             stderr=sys.stderr, text=True, check=False, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"realstack start.sh {what} failed with {out.returncode} (logs in {self.data}/logs)")
        for name, value in re.findall(r"(\w+)=(\S+)", out.stdout):
            self.exports[name] = value
        return self.exports

    def stop(self, wipe: bool = True) -> None:
        """Stop every server of this instance (and delete its state)."""
        subprocess.run([str(self.home / "stop.sh"), "all", *(["--wipe"] if wipe else [])],
                       env={**self.env, "STOP_WAIT": "20"}, stdout=sys.stderr, stderr=sys.stderr, check=False,
                       timeout=300)

    def pid(self, server: str) -> int | None:
        path = self.data / "run" / f"{server}.pid"
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return None

    def kill(self, server: str) -> bool:
        """SIGKILL ``server``'s process (no shutdown: Cassandra replays its commit log at the next start)."""
        pid = self.pid(server)
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    def restart(self, server: str) -> float:
        """Start ``server`` again (after :meth:`kill`); seconds until it accepted connections."""
        t0 = time.monotonic()
        self.start(server)
        return time.monotonic() - t0


def start_instance() -> RealStack:
    """An instance of the first usable folder, started; a folder whose servers do not start falls back to the
    next default with a line on stderr. Raises when none starts."""
    home = find()
    while home is not None:
        data = Path(tempfile.mkdtemp(prefix="realstack-"))
        shutil.rmtree(data)  # start.sh creates it and marks it as its own, so --wipe may remove it whole
        stack = RealStack(home, data)
        try:
            t0 = time.monotonic()
            exports = stack.start()
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            stack.stop(wipe=True)
            home, failed = fallback(home), home
            if home is None:
                raise
            print(f"realstack: {failed} did not start ({e}); falling back to {home}", file=sys.stderr, flush=True)
            continue
        print(f"realstack: {home.name} up in {time.monotonic() - t0:.0f} s: "
              + " ".join(f"{k}={v}" for k, v in exports.items()), file=sys.stderr, flush=True)
        return stack
    raise FileNotFoundError("realstack: no usable realstack folder (start.sh and stop.sh) at "
                            + " or ".join(str(c) for c in candidates()) + "; set REALSTACK_DIR")


def run(command: list[str]) -> int:
    """Run ``command`` with an instance up and the real-peer variables set; stop and wipe it afterwards."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}

    def stop_on(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for s in previous:
        signal.signal(s, stop_on)
    stack: RealStack | None = None
    try:
        try:
            stack = start_instance()
        except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as e:
            print(e, file=sys.stderr)
            return 2
        env = {**os.environ, **stack.exports, "REQUIRE_REAL_PEERS": "1", "REALSTACK_DIR": str(stack.home)}
        return subprocess.run(command, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        if stack is not None:
            stack.stop(wipe=True)
        for s, handler in previous.items():
            signal.signal(s, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.realstack", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("where", help="print the realstack folder (exit 1 when there is none)")
    r = sub.add_parser("run", help="run a command with real servers up (stopped and wiped afterwards)")
    r.add_argument("--folder", choices=DEFAULT_FOLDERS,
                   help="this default folder beside the clone only (no fallback); REALSTACK_DIR still wins")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.verb == "where":
        home = find()
        if home is None:
            return 1
        print(home)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run: no command")
    if args.folder and not os.environ.get("REALSTACK_DIR"):
        os.environ["REALSTACK_DIR"] = str(beside(args.folder))
    return run(command)


if __name__ == "__main__":
    sys.exit(main())
