"""``validate``: check a config, print the plan it compiles to, and warn about risky topic retention.

``--schema`` prints the config's JSON Schema instead (for editors; ``docs/config.schema.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.commands.common import BAD_INPUT, OK, CommandError, compile_all, load_config, parser, warn

SUMMARY = "check a config and print the plan it compiles to (or, with --schema, the config's JSON Schema)"


def add(sub: Any) -> None:
    p = parser(sub, "validate", SUMMARY, "python -m app validate --config examples/wordcount.yaml\n"
                                         "  python -m app validate --schema > config.schema.json")
    p.add_argument("--config", metavar="FILE", help="the YAML config file")
    p.add_argument("--schema", action="store_true", help="print the JSON Schema of a config file and exit")
    p.set_defaults(handler=main)


def schema_text() -> str:
    """The JSON Schema as ``--schema`` prints it (and ``docs/config.schema.json`` holds it)."""
    from app.config import json_schema

    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"  # as app.config.reference.write_all writes it


def main(args: argparse.Namespace) -> int:
    from app.config import describe, retention_warnings
    from app.service.access import sqlite_path_problem

    if args.schema:
        sys.stdout.write(schema_text())
        return OK
    if not args.config:
        msg = "validate needs --config FILE (or --schema)"
        raise CommandError(msg, BAD_INPUT)
    config = load_config(args.config)
    compiled = compile_all(config, args.config)
    for i, p in enumerate(config.pipelines):
        problem = sqlite_path_problem(p.state.sqlite_path) if p.state.backend == "sqlite" else None
        if problem is not None:
            msg = f"config error in {args.config}: pipelines[{i}].state.sqlite_path: {problem}"
            raise CommandError(msg,
                               BAD_INPUT)
    plan = {"spark": {"master": config.spark.master, "conf": sorted(config.spark.conf)},
            "http": {"enabled": config.http.enabled, "host": config.http.host, "port": config.http.port},
            "pipelines": [describe(c.topology, c.coordinator) for c in compiled],
            "topics": [{"name": t.name, "partitions": t.partitions, "replication_factor": t.replication_factor,
                        "configs": dict(t.configs)} for t in config.declared_topics()]}
    print(json.dumps(plan, indent=2))
    for w in [*config.spark.deprecated(), *retention_warnings(config)]:
        warn(w)
    print(f"{args.config}: valid ({len(compiled)} pipeline{'s' if len(compiled) != 1 else ''})", file=sys.stderr)
    return OK

