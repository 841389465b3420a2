"""The scenarios: what each lane does to its pipeline until the budget is spent.

Every choice (which moment, which point, which fault, how long) comes from the lane's seeded RNG; the
timing of the machine decides the rest, so a seed reproduces the schedule, not the exact interleaving.
"""

from __future__ import annotations

import math
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tests.chaos.lane import PIPELINE, TABLE, Lane
from tests.chaos.steer import POINTS, Missed, kill_at
from tests.service.helpers import ServiceProcess


@dataclass
class Budget:
    """Fault phases end at ``deadline`` (monotonic); ``kills`` SIGKILLs across every lane are the aim, and
    the random-moment lane paces itself to reach it (more kills early in start-up while behind)."""

    start: float
    deadline: float
    kills: int
    counter: Callable[[], int]

    def more(self) -> bool:
        return time.monotonic() < self.deadline

    def behind(self) -> bool:
        done = (time.monotonic() - self.start) / max(1.0, self.deadline - self.start)
        return self.counter() < self.kills * min(1.0, done + 0.1)


def start_up_delay(rng: random.Random) -> float:
    """0.3-40 s, log-uniform: kills land in every stage of a start-up (Python, Spark, the store, the lease)."""
    return math.exp(rng.uniform(math.log(0.3), math.log(40.0)))


def wait_commit(service: ServiceProcess, timeout: float = 300.0, at_least: int = 1) -> bool:
    deadline = time.monotonic() + timeout
    while service.commits_this_run() < at_least:
        if service.proc is None or service.proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def exited(lane: Lane, service: ServiceProcess, when: str) -> bool:
    """True (and noted: the service must ride out every fault here) when ``service`` exited by itself."""
    if service.proc is None or service.proc.poll() is None:
        return False
    lane.outcome.notes.append(f"{service.log.name} exited by itself with {service.proc.returncode} {when}")
    return True


# -- 1. SIGKILLs at random moments, with Kafka broker down/up and leader moves ---------------------------

def random_kills(lane: Lane, budget: Budget) -> None:
    """Three instances. Two take turns: the active one is SIGKILLed at a random moment of its running (0-20 s
    after a commit of its own) once the other waits as its standby, which takes over; now and then the
    standby is SIGKILLed as it is and restarted. The third is started and SIGKILLed again and again at a
    random moment of its start-up (Python, Spark, the store, the lease) while the run is behind its kill
    budget. Start-up kills never stop the active instance, so most of the run is spent committing."""
    rng = lane.rng
    stop = threading.Event()
    pair, helpers = start_turns(lane, budget, kafka_faults, stop)
    try:
        while budget.more():
            active = find_active(lane, among=pair)
            if active is None:
                continue
            standby = next(s for s in pair if s is not active)
            if rng.random() < 0.2:
                if not exited(lane, standby, "as a standby"):
                    lane.kill(standby, "standby", interrupts=False)
                standby.start()
                continue
            wait_role(lane, standby, "standby")
            if not wait_commit(active, timeout=120.0):
                exited(lane, active, "before its first commit")
                continue
            time.sleep(rng.uniform(0.0, 20.0))
            if not exited(lane, active, "while aiming a kill at it running"):
                lane.kill(active, "running")
            active.start()  # back as the standby
    finally:
        stop.set()
        for t in helpers:
            t.join()


def start_turns(lane: Lane, budget: Budget, faults: Callable[[Lane, random.Random, threading.Event], None],
                stop: threading.Event) -> tuple[list[ServiceProcess], list[threading.Thread]]:
    """Start the lane's first two instances (they take turns as active and standby), a thread injecting
    ``faults`` and one SIGKILLing the third instance in start-up while the run is behind its budget; the pair
    and the threads (they end when ``stop`` is set)."""
    pair, spare = lane.services[:2], lane.services[2]
    helpers = [threading.Thread(target=faults, args=(lane, random.Random(lane.rng.random()), stop), daemon=True),
               threading.Thread(target=start_up_kills, args=(lane, spare, random.Random(lane.rng.random()), budget,
                                                             stop), daemon=True)]
    for s in pair:
        s.start()
    for t in helpers:
        t.start()
    return pair, helpers


def start_up_kills(lane: Lane, service: ServiceProcess, rng: random.Random, budget: Budget,
                   stop: threading.Event) -> None:
    """While the budget is behind: start ``service`` and SIGKILL it at a random moment of its start-up."""
    while not stop.is_set():
        if not budget.behind():
            stop.wait(2.0)
            continue
        service.start()
        stop.wait(start_up_delay(rng))
        if not exited(lane, service, "in start-up"):
            lane.kill(service, "start-up", interrupts=False)


def wait_role(lane: Lane, service: ServiceProcess, role: str, timeout: float = 180.0) -> bool:
    """Wait until ``service`` reports ``role`` for the pipeline (restarting it if it died)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if exited(lane, service, f"while waited for as {role}"):
            service.start()
        try:
            _, body = service.readyz()
            if body.get("pipelines", {}).get(PIPELINE, {}).get("role") == role:
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return False


def kafka_faults(lane: Lane, rng: random.Random, stop: threading.Event) -> None:
    """Every 10-30 s: a broker down for 3-12 s, or 1-2 partition leaders moved to another broker."""
    kafka = lane.kafka
    while not stop.wait(rng.uniform(10.0, 30.0)):
        if rng.random() < 0.5:
            b = rng.choice(kafka.broker_ids)
            lane.fault("broker down", f"broker {b}", partial(kafka.broker_down, b), rng.uniform(3.0, 12.0),
                       partial(kafka.broker_up, b))
        else:
            for p in rng.sample(range(lane.partitions), rng.randint(1, 2)):
                b = rng.choice(kafka.broker_ids)
                lane.fault("leader move", f"partition {p} -> broker {b}", partial(kafka.set_leader, lane.topic, p, b))


# -- 2. kills steered to every protocol point, a standby taking over, zombies ----------------------------

def protocol_points(lane: Lane, budget: Budget, zombie_every: int = 10) -> None:
    rng = lane.rng
    writes = list(range(1, 65))
    rng.shuffle(writes)
    order = [p for _ in range(1000) for p in POINTS]
    for s in lane.services:
        s.start()
    i = 0
    while budget.more():
        active = find_active(lane)
        if active is None:
            continue
        if not wait_commit(active, at_least=1):
            continue
        time.sleep(rng.uniform(0.0, 10.0))  # some txids of its own before the next aimed kill
        standby = [s for s in lane.services if s is not active]
        if i % zombie_every == 2:
            zombie(lane, active, standby)
        else:
            point = order[i]
            try:
                kill_at(lane, active, point, rng, write=writes[i % len(writes)])
            except Missed as e:
                lane.outcome.notes.append(f"aimed at {point}, missed: {e}")
                exited(lane, active, f"while aiming at {point}")
            active.start()  # back as the standby
        i += 1


def find_active(lane: Lane, timeout: float = 300.0, among: list[ServiceProcess] | None = None,
                ) -> ServiceProcess | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for s in among or lane.services:
            if exited(lane, s, "(found dead)"):
                s.start()
                continue
            try:
                _, body = s.readyz()
                if body.get("pipelines", {}).get(PIPELINE, {}).get("role") == "active":
                    return s
            except (OSError, ValueError):
                pass
        time.sleep(0.2)
    return None


def lease_epoch(lane: Lane) -> int:
    return max((int(r.get("epoch") or 0) for r in lane.peer.rows("trident_state") if r.get("topology") == PIPELINE),
               default=0)


def zombie(lane: Lane, active: ServiceProcess, standbys: list[ServiceProcess]) -> None:
    """SIGSTOP the active instance past its lease; the standby takes over and commits; SIGCONT: the old
    one must find itself fenced and commit nothing: it stops (exit 1, the store told it another coordinator
    took the lease) or steps down to wait as a standby (its own clock told it the lease ran out first)."""
    epoch = lease_epoch(lane)
    before = active.commits_this_run()
    t0 = time.monotonic()
    active.pause()
    deadline = t0 + lane.lease_ttl_s * 4 + 240
    while (lease_epoch(lane) <= epoch or not any(s.commits_this_run() for s in standbys)) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    took = lease_epoch(lane) > epoch
    stopped_s = time.monotonic() - t0
    active.resume()
    deadline = time.monotonic() + 90
    while active.proc is not None and active.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    code = active.proc.poll() if active.proc is not None else None
    after = active.commits_this_run() - before
    stepped = code is None and "stepped down:" in active.run_log()
    detail = (f"stopped {stopped_s:.0f} s (lease TTL {lane.lease_ttl_s:g} s); standby took over: {took}; "
              f"after SIGCONT it committed {after} txids and "
              + ("stepped down to wait as a standby" if stepped else f"exited with {code}"))
    lane.fault("zombie", detail)
    if after or not took or (code in (None, 0) and not stepped):
        lane.outcome.notes.append(f"zombie not fenced as expected: {detail}")
    if code is None:
        lane.kill(active, "zombie (still running after SIGCONT)")
    active.start()


# -- 3. Cassandra faults: CAS timeouts applied and not, dropped connections, an outage ---------------------

CASSANDRA_FAULTS = ("cas timeout applied", "cas timeout not applied", "freeze/mark timeout applied",
                    "freeze/mark timeout not applied", "dropped connection applied", "dropped connection not applied",
                    "outage", "sigkill")


def cassandra_faults(lane: Lane, budget: Budget) -> None:
    rng, s, rpc = lane.rng, lane.services[0], lane.peer.rpc
    s.start()
    wait_commit(s)
    i = 0
    kinds = list(CASSANDRA_FAULTS)
    while budget.more():
        time.sleep(rng.uniform(2.0, 6.0))
        if exited(lane, s, "under Cassandra faults"):
            s.start()
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        i += 1
        n = rng.randint(1, 3)
        applied = "not applied" not in kind
        if kind.startswith("cas timeout"):
            fid = rpc.inject({"effect": "cas_timeout", "applied": applied, "table": TABLE, "after": rng.randint(0, 40),
                              "times": n})
            lane.fault(kind, f"{n} state LWTs time out (write type CAS)", hold_s=5.0, undo=partial(rpc.remove, fid))
        elif kind.startswith("freeze/mark"):
            fid = rpc.inject({"effect": "cas_timeout", "applied": applied, "table": "trident_state",
                              "cql_contains": "SET value", "times": 1})
            lane.fault(kind, "the next freeze or mark LWT times out (write type CAS)", hold_s=5.0,
                       undo=partial(rpc.remove, fid))
        elif kind.startswith("dropped"):
            fid = rpc.inject({"effect": "drop", "applied": applied, "table": TABLE, "conditional": True,
                              "after": rng.randint(0, 40), "times": 1})
            lane.fault(kind, "the connection of a state LWT is closed without an answer", hold_s=5.0,
                       undo=partial(rpc.remove, fid))
            lane.fault("all connections dropped", "", rpc.disconnect)
        elif kind == "outage":
            lane.fault("outage", "the node stops listening and every connection closes", rpc.down,
                       rng.uniform(5.0, 20.0), rpc.up)
        else:
            lane.kill(s, "running")
            s.start()


# -- 4. retention truncation under both data-loss policies ---------------------------------------------

def retention(lane: Lane, budget: Budget) -> None:
    rng, s = lane.rng, lane.services[0]
    s.start()
    wait_commit(s)
    p, lost = truncate_while_down(lane, s)
    s.start()
    deadline = time.monotonic() + 300
    while s.proc is not None and s.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    code = s.proc.poll() if s.proc is not None else None
    named = re.search(rf"data loss on {lane.topic}:{p}: .*\((\d+) offsets gone\)", s.run_log())
    if named is not None and int(named.group(1)) != lost:
        lane.outcome.error = f"data_loss fail names {named.group(1)} offsets gone, {lost} were truncated"
    lane.fault("truncation (fail)", f"{lost} unread records of partition {p} removed; the service exited with {code}"
               f"{', naming the partition' if named else ', NOT naming the partition'}")
    if code != 1 or not named:
        lane.outcome.error = f"data_loss fail: exit {code}, named: {bool(named)}; see {s.log}"
        s.cleanup()
    Lane.configure(s.config, data_loss="skip")
    lane.producer.resume()
    while budget.more():
        s.start()
        if budget.behind() and rng.random() < 0.7:
            time.sleep(start_up_delay(rng))
            if not exited(lane, s, "in start-up"):
                lane.kill(s, "start-up")
            continue
        wait_commit(s)
        time.sleep(rng.uniform(2.0, 10.0))
        if rng.random() < 0.3:
            p, lost = truncate_while_down(lane, s)
            lane.fault("truncation (skip)", f"{lost} unread records of partition {p} removed while the service was down")
            lane.producer.resume()
        elif not exited(lane, s, "in the retention lane"):
            lane.kill(s, "running")


def truncate_while_down(lane: Lane, s: ServiceProcess, burst: int = 50) -> tuple[int, int]:
    """Drain (producer paused), SIGKILL, produce ``burst`` records to one partition, delete the first
    60% of them: exactly those leave the truth. The producer stays paused."""
    lane.producer.pause()
    truth = dict(lane.producer.truth())
    deadline = time.monotonic() + 300
    while (lane.stored() != truth or lane.landed()[0] != "not frozen") and time.monotonic() < deadline:
        time.sleep(0.5)  # everything counted and marked committed: the service is idle
    k = lane.kill(s, "before a truncation")
    time.sleep(2.0)  # a request the killed process sent is answered by now
    if k.landed != "not frozen" or lane.landed()[0] != "not frozen" or lane.stored() != truth:
        raise RuntimeError("the service did not drain before the truncation: the truth would be uncertain")
    p = lane.rng.randrange(lane.partitions)
    offsets = lane.producer.burst(p, burst)
    cut = offsets[int(burst * 0.6) - 1] + 1
    lane.kafka.delete_records(lane.topic, p, cut)
    return p, lane.producer.truncated(p, cut, after=offsets[0] - 1)


SCENARIOS: dict[str, tuple[Callable[[Lane, Budget], None], dict[str, object], str]] = {
    "random-kills": (random_kills, {"instances": 3, "lease_ttl_s": 4.0, "rate": 60.0},
                     ("SIGKILLs at random moments: of the active instance while it commits (its standby takes over), "
                     "of the standby, and of a third instance in start-up; Kafka brokers down/up and partition "
                     "leader moves every 10-30 s")),
    "protocol-points": (protocol_points, {"instances": 3, "transactional": True, "lease_ttl_s": 4.0, "max_pending": 1,
                                          "rate": 40.0},
                        ("SIGKILLs steered to plan, process, freeze, each commit write and mark of the active "
                        "instance of three (two standbys; one takes over each time); every 10th round (from the 3rd) a "
                        "zombie: the active instance SIGSTOPped past its lease, then SIGCONT; producer in "
                        "committed transactions")),
    "cassandra-faults": (cassandra_faults, {"transactional": True, "rate": 40.0},
                         ("CAS write timeouts applied and not applied (state LWTs, freeze and mark), dropped "
                         "connections applied and not, every connection dropped, Cassandra outages of 5-20 s, "
                         "SIGKILLs")),
    "retention": (retention, {"rate": 40.0},
                  ("retention truncation of unread records: under data_loss fail (the service must stop, exit 1, "
                  "naming the partition), then under skip (the truth loses exactly the truncated records); "
                  "SIGKILLs")),
}
