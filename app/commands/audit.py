"""``audit``: recount the committed source ranges independently of the pipeline and compare the stored tables.

The recount (:mod:`app.audit.recount`) reads with a consumer of its own and aggregates with Spark's
built-in functions on a local Spark session like the service's, and never writes a table: its
results are collected to the driver. The stored table is read as of the audited txid while the
service keeps running (:mod:`states.asof`). Exit 0 only when no key differs; 5 when one does; 2
when the audit is refused (ranges the source no longer holds, a state without per-key txids, plans
no longer stored).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from app.commands.common import BAD_INPUT, OK, CommandError, add_config, load_config, parser, pipeline_of, progress
from app.commands.output import plain, print_json

SUMMARY = "recount a pipeline's committed source ranges and compare its stored tables key by key"
DIFFERS = 5  # the audit found a key that differs, is missing, extra or stored twice


def add(sub: Any) -> None:
    p = parser(sub, "audit", SUMMARY, "python -m app audit --config examples/wordcount.yaml --pipeline word-count")
    p.epilog = (p.epilog or "") + f"\n  {DIFFERS}  audit only: a stored key differs from the recount, is missing, extra or stored twice"
    add_config(p)
    p.add_argument("--pipeline", required=True, metavar="ID", help="the pipeline to audit")
    p.add_argument("--sink", metavar="TABLE", help="only this table (default: every table of the pipeline)")
    p.add_argument("--at", type=int, metavar="N", help="audit as of committed txid N (default: the last committed)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start", choices=["earliest"], default="earliest",
                       help="recount from the first offsets the pipeline ever covered (the default)")
    start.add_argument("--since", type=int, metavar="M",
                       help="recount only what txids M+1..N added, against the stored values as of M and N")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--keys", nargs="+", metavar="K", help="compare only these keys (as query --key takes them)")
    which.add_argument("--sample", type=float, metavar="FRACTION",
                       help="compare a deterministic sample of the keys (0 < FRACTION <= 1)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--metrics-file", metavar="FILE",
                   help="also write the result as Prometheus metrics (trident_audit_last_*) to FILE, for a "
                        "node exporter's textfile collector (written whole, then renamed)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from app.audit.ranges import AuditRefusedError
    from app.audit.run import audit, log_starts_of
    from app.config import compile_pipeline
    from app.topology.key_text import KeyTextError

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.sample is not None and not 0 < args.sample <= 1:
        msg = f"--sample {args.sample}: must be a fraction in (0, 1]"
        raise CommandError(msg, BAD_INPUT)
    config = load_config(args.config)
    pipeline = pipeline_of(config, args.pipeline)
    compiled = compile_pipeline(config, pipeline)
    progress(f"auditing pipeline {compiled.id}")
    try:
        report = audit(config, compiled, lambda: _spark(config), at=args.at, since=args.since, sink=args.sink, keys=args.keys,
                       sample=args.sample, log_starts=log_starts_of(config, pipeline), progress=progress)
    except AuditRefusedError as e:
        msg = f"refused: {e}"
        raise CommandError(msg, BAD_INPUT) from None
    except KeyTextError as e:
        raise CommandError(str(e), BAD_INPUT) from None
    if args.metrics_file:
        write_metrics(args.metrics_file, report.pipeline, report.at, report.differences)
    if args.json:
        print_json(report.to_json())
    else:
        print_report(report)
    return DIFFERS if report.differences else OK


def write_metrics(path: str, pipeline: str, txid: int, differences: int) -> None:
    """The audit's result as the service's ``trident_audit_last_*`` metrics, in Prometheus' text format."""
    import time

    from prometheus_client import CollectorRegistry, write_to_textfile

    from app.metrics import Metrics

    metrics = Metrics(CollectorRegistry())
    metrics.record_audit(pipeline, txid, differences, time.time())
    audit_only = CollectorRegistry()
    for gauge in (metrics.audit_result, metrics.audit_differences, metrics.audit_timestamp, metrics.audit_txid):
        audit_only.register(gauge)
    write_to_textfile(path, audit_only)


def _spark(config: Any) -> Any:
    from app.spark.session import spark_session

    s = config.spark
    return spark_session(master=s.master, app_name=f"{s.app_name}-audit", conf=dict(s.conf))


def print_report(r: Any) -> None:
    doc = r.to_json(limit=50)
    print(f"audit of pipeline {r.pipeline} as of txid {r.at}" + (f", since txid {r.since}" if r.since else ""))
    print(f"  recounted: {r.records} records in {r.recount_s:.1f} s (compared in {r.compare_s:.1f} s)")
    bad = doc["bad_records"]
    print(f"  bad records left out: {bad['total']} (policy {bad['policy']}"
          + "".join(f", {k} {v}" for k, v in bad.items() if k not in ("policy", "total")) + ")")
    if doc["left_out"]:
        gone = ", ".join(f"{g['partition']} {g['from_offset']}..{g['to_offset']}" for g in doc["left_out"])
        print(f"  left out: {gone}: topics the config no longer reads (whatever they added to a table differs)")
    _print_dead_letters(doc["dead_letters"])
    if r.reread_at:
        print(f"  keys written again since were compared as of txids {', '.join(map(str, r.reread_at))} (the value "
              "each stored before its last write)")
    for t in doc["tables"]:
        print(f"  table {t['table']}: checked {t['checked']}, equal {t['equal']}, differing {t['differs']}, "
              f"missing {t['missing']}, extra {t['extra']}, duplicate {t['duplicate']}, skipped {t['skipped']}")
        for k in t["keys"]:
            print(f"    {k['outcome']:8} key {_key(k['key'])}: recount {_v(k['expected'])}, stored {_v(k['stored'])} "
                  f"(stored txid {k['stored_txid']}){'; ' + k['reason'] if k['reason'] else ''}")
    print("  result: " + ("EQUAL: every key checked matches the recount" if not r.differences
                          else f"{r.differences} DIFFERENCES from the recount (keys and dead letters)"))
    sys.stdout.flush()


def _print_dead_letters(letters: dict[str, Any] | None) -> None:
    """The dead-letter lines of the report (a dead-letter policy only)."""
    if letters is None or letters["topic"] is None:
        return
    print(f"  dead-letter topic {letters['topic']}: {letters['in_topic']} dead letters for the audited ranges, "
          f"{letters['bad_records']} bad records recounted; missing {len(letters['missing'])}, twice "
          f"{len(letters['twice'])}, not bad in the recount {len(letters['unexpected'])}")
    for c in letters["missing"]:
        print(f"    missing  record {_coords(c)}: left out as bad by the recount, no dead letter")
    for t in letters["twice"]:
        print(f"    twice    record {_coords(t['record'])}: {t['copies']} dead letters")
    for c in letters["unexpected"]:
        print(f"    unexpected record {_coords(c)}: a dead letter, but the recount counts the record")
    if letters["rewound_copies"]:
        print(f"    {letters['rewound_copies']} more dead letters of records a rewind read again (not a difference)")
    if letters["unverifiable"]:
        starts = ", ".join(f"{p} at {o}" for p, o in letters["topic_log_start"].items())
        print(f"    {letters['unverifiable']} bad records have no dead letter, but the topic no longer holds its "
              f"start (partitions {starts}): not verifiable")


def _coords(c: list[Any]) -> str:
    return f"{c[0]}:{c[1]}@{c[2]}"


def _key(key: list[Any]) -> str:
    return ",".join(str(plain(k)) for k in key)


def _v(v: Any) -> str:
    return "-" if v is None else str(plain(v))
