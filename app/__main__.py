"""Command line of the service.

    python -m app run --config FILE        run the pipelines of a config until SIGTERM/SIGINT
    python -m app validate --config FILE   check a config and print the plan it compiles to
    python -m app demo                     word count on Spark over an in-process Kafka, checked

Exit codes: 0 success; 1 a failed run or a demo mismatch; 2 a bad config or bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the pipelines of a config until SIGTERM/SIGINT")
    run.add_argument("--config", required=True, help="the YAML config file")
    validate = sub.add_parser("validate", help="check a config and print the plan it compiles to")
    validate.add_argument("--config", required=True, help="the YAML config file")
    demo = sub.add_parser("demo", help="word count on Spark over an in-process Kafka, checked against the input")
    demo.add_argument("--records", type=int, default=100_000, help="sentences to produce (default 100000)")
    demo.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    demo.add_argument("--db", help="SQLite state file (default: in a temporary directory)")
    demo.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    demo.add_argument("--memory", action="store_true", help="the in-memory demo without Spark or Kafka")
    args = parser.parse_args(argv)

    if args.command == "demo":
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
        if args.memory:
            from app.demo_memory import run as run_memory

            return run_memory(args.records, args.partitions)
        from app.demo import run as run_demo

        return run_demo(args.records, args.partitions, db=args.db, master=args.master)

    from app.config import ConfigError, compile_pipeline, describe, load

    try:
        config = load(args.config)
        compiled = [compile_pipeline(config, p) for p in config.pipelines]
    except ConfigError as e:
        print(f"config error in {args.config}: {e}", file=sys.stderr)
        return 2
    if args.command == "validate":
        plan = {"spark": {"master": config.spark.master, "conf": sorted(k for k, _ in config.spark.conf)},
                "http": {"enabled": config.http.enabled, "host": config.http.host, "port": config.http.port},
                "pipelines": [describe(c.topology, c.coordinator) for c in compiled]}
        print(json.dumps(plan, indent=2))
        print(f"{args.config}: valid ({len(compiled)} pipeline{'s' if len(compiled) != 1 else ''})", file=sys.stderr)
        return 0

    logging.basicConfig(level=config.service.log_level, format=LOG_FORMAT)
    from app.service import Service

    return Service(config).run()


if __name__ == "__main__":
    sys.exit(main())
