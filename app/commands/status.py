"""``status``: where every pipeline stands, read from its store and Kafka, without the service running.

Per pipeline: the lease holder, its epoch and expiry; the last committed txid and when; a frozen
but uncommitted txid (the next start replays it exactly); per partition the committed next
offset, the end offset and the lag, and whether the pipeline reads it now (a partition of a topic that is
missing, deleted or no longer configured keeps its position: docs/design.md). Standby instances hold no lease and leave nothing in the
store: their state is on each instance's ``/readyz``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from app.commands.common import OK, PARTIAL, add_config, compile_all, load_config, parser, pipeline_of, progress
from app.commands.output import print_json, print_table
from app.kafka_offsets import KafkaOffsets, kafka_reason

SUMMARY = "show every pipeline's lease, committed txid, frozen txid and per-partition lag"


def add(sub: Any) -> None:
    p = parser(sub, "status", SUMMARY, "python -m app status --config examples/wordcount.yaml --json")
    add_config(p)
    p.add_argument("--pipeline", metavar="ID", help="only this pipeline")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.pipeline:
        pipeline_of(config, args.pipeline)
    compiled = [c for c in compile_all(config, args.config) if args.pipeline in (None, c.id)]
    reports = []
    for c in compiled:
        progress(f"reading pipeline {c.id}")
        reports.append(pipeline_status(config, c))
    if args.json:
        print_json(reports)
    else:
        for r in reports:
            print_report(r)
    return PARTIAL if any(r["errors"] for r in reports) else OK


def pipeline_status(config: Any, compiled: Any) -> dict[str, Any]:
    """One pipeline's status as plain data (what ``--json`` prints)."""
    from app.config import spout_config
    from app.coordinator.progress import read_progress

    now = time.time()
    report: dict[str, Any] = {"pipeline": compiled.id, "backend": compiled.state.backend, "lease": None,
                              "standby": "not recorded in the store (see /readyz of each instance)",
                              "committed_txid": 0, "committed_at": None, "frozen_txid": None, "frozen_attempt": None,
                              "partitions": [], "errors": []}
    if compiled.state.backend == "sqlite" and not Path(compiled.state.sqlite_path).exists():
        report["errors"].append(f"state file {compiled.state.sqlite_path} does not exist (never run?)")
        return report
    store = compiled.store()
    info = store.lease_info()
    if info is not None:
        report["lease"] = {"owner": info.owner, "epoch": info.epoch, "expires_at": info.expires_at,
                           "expires_in_s": None if info.expires_at is None else round(info.expires_at - now, 1)}
    prog = read_progress(store)
    report["committed_txid"], report["committed_at"] = prog.committed_txid, prog.committed.committed_at
    if prog.frozen is not None:
        report["frozen_txid"], report["frozen_attempt"] = prog.frozen.txid, prog.frozen.attempt
    committed = {} if prog.committed_plan is None else \
        {m.partition_id: m.next_offset for m in prog.committed_plan.partitions.values()}
    ends: dict[Any, tuple[int, int]] = {}
    listed: set[Any] | None = None
    try:
        with KafkaOffsets(spout_config(config, config.pipeline(compiled.id)), compiled.id) as kafka:
            listed = set(kafka.partitions())
            ends = kafka.watermarks(sorted(listed))
    except Exception as e:  # noqa: BLE001 - Kafka away: the stored part of the status is still worth showing
        report["errors"].append(f"cannot read end offsets from Kafka: {kafka_reason(e)}")
    for p in sorted(set(committed) | (listed or set())):
        nxt, end = committed.get(p), ends.get(p, (None, None))[1]
        report["partitions"].append({"partition": p.id, "committed_next_offset": nxt, "end_offset": end,
                                     "lag": None if end is None else max(0, end - (nxt or ends[p][0])),
                                     "read_now": None if listed is None else p in listed})
    return report


def print_report(r: dict[str, Any]) -> None:
    print(f"pipeline {r['pipeline']} ({r['backend']})")
    lease = r["lease"]
    print("  lease:     " + ("free (no coordinator holds it)" if lease is None else
                             f"held by {lease['owner']} (epoch {lease['epoch']})" +
                             ("" if lease["expires_in_s"] is None else f", expires in {lease['expires_in_s']:g} s")))
    print(f"  standby:   {r['standby']}")
    when = "" if r["committed_at"] is None else (
        f" at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(r['committed_at']))} "
        f"({time.time() - r['committed_at']:.0f} s ago)")
    print(f"  committed: txid {r['committed_txid']}{when}")
    print("  frozen:    " + ("none" if r["frozen_txid"] is None else
                             f"txid {r['frozen_txid']} (attempt {r['frozen_attempt']}): replayed by the next start"))
    for e in r["errors"]:
        print(f"  error:     {e}")
    if r["partitions"]:
        print()
        print_table(["partition", "committed_next_offset", "end_offset", "lag"], r["partitions"])
        kept = [row["partition"] for row in r["partitions"] if row["read_now"] is False]
        if kept:
            print(f"  kept:      {', '.join(kept)}: not read now (topic missing, deleted, or no longer in the config); "
                  "their positions are kept and used when they come back (rewind --forget TOPIC forgets them)")
    print()
