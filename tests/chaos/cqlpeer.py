"""The CQL test server in its own process, with a loopback XML-RPC control port for the harness.

The server outlives every killed service run; the harness injects faults (CAS timeouts, dropped
connections, holds), takes the node down and up (an outage), and reads rows without the network path
(no driver, no faults, no counting). ``python -m tests.chaos.cqlpeer --port N --control M``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import xmlrpc.client
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from xmlrpc.server import SimpleXMLRPCServer

from tests.cqlserver import CqlServer, Fault

ROOT = Path(__file__).resolve().parents[2]


class _Server(ThreadingMixIn, SimpleXMLRPCServer):
    daemon_threads = True


class Control:
    """What the harness may do to the server (every answer is JSON text: XML-RPC ints are 32-bit)."""

    def __init__(self, server: CqlServer) -> None:
        self.server = server
        self.faults: dict[int, tuple[Fault, threading.Event | None]] = {}
        self._next = 0

    def inject(self, spec: dict[str, Any]) -> int:
        """Add a fault from ``spec`` (``effect`` plus the matchers of :class:`Fault`); ``hold`` makes it a hold."""
        spec = dict(spec)
        effect = spec.pop("effect")
        release = None
        if effect == "hold":
            release = threading.Event()
            fault = Fault.hold(release, seconds=spec.pop("seconds", 120.0), **spec)
        elif effect == "cas_timeout":
            fault = Fault.write_timeout_cas(**spec)
        elif effect == "drop":
            fault = Fault.drop_connection(**spec)
        elif effect == "delay":
            fault = Fault.delay(**spec)
        else:
            raise ValueError(f"unknown effect {effect}")
        self.server.inject(fault)
        self._next += 1
        self.faults[self._next] = (fault, release)
        return self._next

    def fired(self, fid: int) -> int:
        return self.faults[fid][0].fired

    def release(self, fid: int) -> bool:
        _fault, release = self.faults[fid]
        if release is not None:
            release.set()
        self.remove(fid)
        return True

    def remove(self, fid: int) -> bool:
        fault, _ = self.faults[fid]
        with self.server.faults._lock:  # the injector has no removal of one fault
            if fault in self.server.faults._faults:
                self.server.faults._faults.remove(fault)
        return True

    def clear(self) -> bool:
        for _, release in self.faults.values():
            if release is not None:
                release.set()
        self.server.clear_faults()
        return True

    def down(self) -> bool:
        self.server.stop()
        return True

    def up(self) -> bool:
        self.server.start()
        return True

    def disconnect(self) -> int:
        n = self.server.connection_count
        self.server.disconnect_clients()
        return n

    def rows(self, keyspace: str, table: str) -> str:
        try:
            return json.dumps(self.server.rows(keyspace, table), default=str)
        except Exception:  # noqa: BLE001 - no such keyspace or table yet
            return "[]"

    def ping(self) -> bool:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.cqlpeer")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--control", type=int, required=True)
    args = parser.parse_args(argv)
    server = CqlServer("127.0.0.1", args.port).start()
    rpc = _Server(("127.0.0.1", args.control), allow_none=True, logRequests=False)
    rpc.register_instance(Control(server))
    print(f"cqlpeer listening on {server.contact_point}, control on {args.control}", flush=True)
    rpc.serve_forever()
    return 0


class StoreDocuments:
    """The coordinator's documents as the harness reads them, from a handle's ``rows``."""

    def rows(self, table: str, keyspace: str = "trident") -> list[dict[str, Any]]:
        raise NotImplementedError

    def documents(self, topology: str) -> dict[str, str]:
        """The coordinator's documents (``coordinator``, ``batches/<txid>``) of ``topology``."""
        return {r["key"]: r["value"] for r in self.rows("trident_state")
                if r.get("topology") == topology and r.get("value") is not None
                and (r["key"] == "coordinator" or r["key"].startswith("batches/"))}

    def committed_txid(self, topology: str) -> int:
        doc = self.documents(topology).get("coordinator")
        return 0 if doc is None else int(json.loads(doc)["committed_txid"])


class CqlPeer(StoreDocuments):
    """The harness's handle: starts the peer process, and calls its control port."""

    def __init__(self, port: int, control: int, log: Path) -> None:
        self.port, self.control_port, self.log = port, control, log
        self.proc: subprocess.Popen[bytes] | None = None
        self._local = threading.local()

    @property
    def rpc(self) -> Any:
        """One proxy per thread (a ServerProxy is not thread-safe)."""
        if not hasattr(self._local, "proxy"):
            self._local.proxy = xmlrpc.client.ServerProxy(f"http://127.0.0.1:{self.control_port}", allow_none=True)
        return self._local.proxy

    def start(self) -> CqlPeer:
        out = open(self.log, "wb")  # noqa: PTH123, SIM115  a plain open() of a log path; open for the child process's lifetime
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.chaos.cqlpeer", "--port", str(self.port),
                                      "--control", str(self.control_port)], cwd=ROOT, stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while b"listening" not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"cqlpeer did not start: {self.log.read_text()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def rows(self, table: str, keyspace: str = "trident") -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = json.loads(self.rpc.rows(keyspace, table))
        return rows


if __name__ == "__main__":
    sys.exit(main())
