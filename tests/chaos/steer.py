"""Steering a SIGKILL to a protocol point of a txid, by holding the coordinator's requests at the CQL peer.

Per txid the coordinator writes, in order: the freeze (``UPDATE trident_state SET value ... IF epoch``
of ``batches/<txid>``), the state (one LWT per key on the state table), and the mark (the same UPDATE
of ``coordinator``). The peer holds the next matching request; while it is held the harness knows
where the service is, SIGKILLs the process group, then lets the request go on (it lands after its
sender died, as a request in flight may on a real cluster). Plan and process have no request of their
own: a kill right after a mark is released lands in the next txid's plan, a later one in its processing.
"""

from __future__ import annotations

import json
import random
import time

from tests.chaos.lane import PIPELINE, TABLE, Kill, Lane, frozen_txids
from tests.service.helpers import ServiceProcess

POINTS = ("plan", "process", "freeze", "commit write", "mark")
PUT = {"effect": "hold", "table": "trident_state", "statement": "update", "cql_contains": "SET value", "times": 1}


class Missed(Exception):
    """The service did not reach the point in time (it died, or nothing was produced)."""


def wait_fired(lane: Lane, fid: int, service: ServiceProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lane.peer.rpc.fired(fid):
            return True
        if service.proc is None or service.proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def hold_freeze(lane: Lane, service: ServiceProcess, timeout: float = 120.0) -> int:
    """Hold the next freeze write (a put of ``batches/<committed+1>``, which is not stored yet); its fault id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fid = lane.peer.rpc.inject(PUT)
        if not wait_fired(lane, fid, service, deadline - time.monotonic()):
            lane.peer.rpc.release(fid)
            break
        docs = lane.peer.documents(PIPELINE)  # one read: the marker and the plans together
        marker = docs.get("coordinator")
        committed = 0 if marker is None else int(json.loads(marker)["committed_txid"])
        if committed + 1 not in frozen_txids(docs):
            return fid
        lane.peer.rpc.release(fid)  # a mark, or the attempt count of a replay: let it through
    raise Missed("no freeze write seen")


def hold_next_put(lane: Lane, service: ServiceProcess, timeout: float = 120.0) -> int:
    fid = lane.peer.rpc.inject(PUT)
    if not wait_fired(lane, fid, service, timeout):
        lane.peer.rpc.release(fid)
        raise Missed("no put seen")
    return fid


def kill_at(lane: Lane, service: ServiceProcess, point: str, rng: random.Random, write: int = 1) -> Kill:
    """SIGKILL ``service`` (the active instance, past its first commit) at ``point``."""
    rpc = lane.peer.rpc
    freeze = hold_freeze(lane, service)
    if point == "freeze":
        return lane.kill(service, "freeze", lambda: rpc.release(freeze))
    if point == "commit write":
        state = rpc.inject({"effect": "hold", "table": TABLE, "conditional": True, "after": write - 1, "times": 1})
        rpc.release(freeze)
        wait_fired(lane, state, service, 60.0)
        return lane.kill(service, f"commit write {write}", lambda: rpc.release(state))
    rpc.release(freeze)
    mark = hold_next_put(lane, service)
    if point == "mark":
        return lane.kill(service, "mark", lambda: rpc.release(mark))
    rpc.release(mark)
    time.sleep(rng.uniform(0.0, 0.02) if point == "plan" else rng.uniform(0.15, 1.5))
    return lane.kill(service, point)
