"""``demo``: word count on Spark over an in-process Kafka (or in memory), checked against its input."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from app.commands.common import BAD_INPUT, LOG_FORMAT, CommandError, parser

SUMMARY = "word count on Spark over an in-process Kafka, checked against the input"


def add(sub: Any) -> None:
    p = parser(sub, "demo", SUMMARY, "python -m app demo --records 10000 --partitions 4")
    p.add_argument("--records", type=int, default=200_000, help="sentences to produce (default 200000: four txids "
                   "of 50000, the size where a txid's fixed cost stops dominating)")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    p.add_argument("--db", help="SQLite state file (default: in a temporary directory)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--memory", action="store_true", help="the in-memory demo without Spark or Kafka")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    if args.memory:
        from app.demo.memory import run as run_memory

        return run_memory(args.records, args.partitions)
    from app.demo.spark import DemoMasterError
    from app.demo.spark import run as run_demo

    try:
        return run_demo(args.records, args.partitions, db=args.db, master=args.master)
    except DemoMasterError as e:
        raise CommandError(str(e), BAD_INPUT) from None
