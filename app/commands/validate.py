"""``validate``: check a config, print the plan it compiles to, and warn about risky topic retention."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.commands.common import OK, add_config, compile_all, load_config, parser, warn

SUMMARY = "check a config and print the plan it compiles to"


def add(sub: Any) -> None:
    p = parser(sub, "validate", SUMMARY, "python -m app validate --config examples/wordcount.yaml")
    add_config(p)
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from app.config import describe, retention_warnings

    config = load_config(args.config)
    compiled = compile_all(config, args.config)
    plan = {"spark": {"master": config.spark.master, "conf": sorted(k for k, _ in config.spark.conf)},
            "http": {"enabled": config.http.enabled, "host": config.http.host, "port": config.http.port},
            "pipelines": [describe(c.topology, c.coordinator) for c in compiled],
            "topics": [{"name": t.name, "partitions": t.partitions, "replication_factor": t.replication_factor,
                        "configs": dict(t.configs)} for t in config.topics]}
    print(json.dumps(plan, indent=2))
    for w in retention_warnings(config):
        warn(w)
    print(f"{args.config}: valid ({len(compiled)} pipeline{'s' if len(compiled) != 1 else ''})", file=sys.stderr)
    return OK
