"""The replica lane's figures for docs/reliability.md: each scenario's last run kept in a JSON record
(``REPLICA_RECORD=docs/reliability/replicas.json``) and rendered beside it as ``replicas.md``, which the chaos
report appends as it is (tests/chaos/report.py, KEPT_BY_HAND)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tests.replicas.lane import Outcome

INTRO = (
    "`make test-replicas` (tests/replicas; CI runs the short form, `make test-replicas-short`: scenarios a, b and d "
    "once each). A cluster of 3 Apache Cassandra 5.0 nodes (keyspace `NetworkTopologyStrategy` RF 3, the service's "
    "default `LOCAL_QUORUM` / `LOCAL_SERIAL`, `request_timeout_s` 10, the servers' write timeout 3 s where the lane starts the cluster; the runs below ran on "
    "one started by hand with the kit's 5 s) and 3 Apache "
    "Kafka 4.4 brokers (topics RF 3, `min.insync.replicas=2`, `acks=all` idempotent producers) on loopback; one "
    "service process (two in f) runs a word count into Cassandra while a producer writes about 150 sentences a "
    "second. Nodes are SIGKILLed (`kill`), SIGSTOPped (`pause`, a hung node: its sockets open, nothing answering) "
    "or stopped cleanly, and started again, under the running pipeline; the service process is never restarted "
    "(but in f, where the active one is killed on purpose). Each scenario ends with every node up, the producer "
    "stopped, the service drained and SIGTERMed (exit 0), and the stored counts read at QUORUM and compared key by "
    "key with the producer's truth (its delivery reports, and for transactions the committed ones only; a record "
    "whose delivery report was an error but which a plain consumer finds in the log, as a broker restart can leave "
    "one, joins the truth: each record carries a sequence number as its key). A *stall* "
    "is the longest time without a commit around a fault (the commits seen on the service's `/metrics`); "
    "*unknown outcomes* are the service's `trident_cas_unknown_outcomes_total` by resolution.")

SCENARIOS = {
    "a": "one Cassandra node of three SIGKILLed, in turn on each node and aimed at the conditional writes (the "
         "commit's LWTs or batches, the txid store's), the reads, the lease's renewal, plain writes; started again each "
         "time",
    "b": "two Cassandra nodes of three hung 8 s with the commit's LWTs in flight (outcomes unknown, then resolved), "
         "then hung 20 s and SIGKILLed: commits stop, `/readyz` says why; one node started again, then the other",
    "c": "one Cassandra node hung (SIGSTOP) for 30 s, then resumed",
    "d": "the source written in transactions, a fifth aborted on purpose, read `read_committed`: the leader broker of "
         "partition 0 SIGKILLed mid-read and restarted, a broker hung 20 s, a broker stopped and started with "
         "transactions open",
    "e": "a rolling restart: each Cassandra node stopped and started in turn, then each broker",
    "f": "an active instance whose only contact point is node 2 and a standby knowing nodes 1 and 3: node 2 and the "
         "active instance SIGKILLed together; the standby takes over",
}


def record(name: str, outcome: Outcome, seconds: float) -> None:
    """Keep ``outcome`` of scenario run ``name`` in ``REPLICA_RECORD`` (when set) and render the markdown beside it."""
    path = os.environ.get("REPLICA_RECORD")
    if not path:
        return
    p = Path(path)
    runs: dict[str, Any] = json.loads(p.read_text()) if p.exists() else {}
    runs[name] = {"started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() - seconds)),
                  "seconds": round(seconds), "load": round(os.getloadavg()[0], 1), "records": outcome.records,
                  "aborted_transactions": outcome.aborted_transactions, "keys": outcome.keys, "words": outcome.words,
                  "lost": outcome.lost, "twice": outcome.twice, "differing": outcome.differing,
                  "duplicated_rows": outcome.duplicated_rows, "failed_deliveries": outcome.failed_deliveries,
                  "landed_anyway": outcome.landed_anyway, "unknown": dict(outcome.unknown),
                  "stalls": [[f, round(s, 1)] for f, s in outcome.stalls], "exit_code": outcome.exit_code}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    p.with_suffix(".md").write_text(render(runs))


def render(runs: dict[str, Any]) -> str:
    lines = ["## A replicated cluster: 3 Cassandra nodes, 3 Kafka brokers", "", INTRO, ""]
    lines += ["| scenario | what was done | records | lost | twice | unknown LWT outcomes | longest stall per fault | exit |",
              "|---|---|---|---|---|---|---|---|"]
    for name in sorted(runs):
        r = runs[name]
        letter = name.split("-")[0]
        unknown = ", ".join(f"{k} {v}" for k, v in sorted(r["unknown"].items())) or "0"
        stalls = "; ".join(f"{f}: {s:.1f} s" for f, s in r["stalls"]) or "-"
        failed = r.get("failed_deliveries", 0)
        deliveries = f"; {failed} failed deliveries, {r.get('landed_anyway', 0)} in the log" if failed else ""
        lines.append(f"| {name} | {SCENARIOS.get(letter, '')} | {r['records']} ({r['aborted_transactions']} "
                     f"transactions aborted{deliveries}), {r['keys']} keys | {r['lost']} | {r['twice']} | {unknown} | "
                     f"{stalls} | {r['exit_code']} |")
    lines += ["", "Each row is the scenario's last recorded run (`REPLICA_RECORD=docs/reliability/replicas.json "
              "make test-replicas`); when: " + "; ".join(f"{n} {runs[n]['started']} (load {runs[n]['load']})"
                                                      for n in sorted(runs)) + ".", ""]
    return "\n".join(lines)
