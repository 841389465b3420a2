"""``run``: every pipeline of a config until SIGTERM/SIGINT (see :mod:`app.service`)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from app.commands.common import LOG_FORMAT, add_config, compile_all, load_config, parser

#: Libraries whose start-up and connection chatter the service says in its own lines (shown with --debug):
#: the Cassandra driver's protocol negotiation and data-centre choice, py4j's connection closes.
QUIET_UNLESS_DEBUG = {"cassandra": logging.ERROR, "py4j": logging.WARNING}

SUMMARY = "run the pipelines of a config until SIGTERM/SIGINT"


def add(sub: Any) -> None:
    p = parser(sub, "run", SUMMARY, "python -m app run --config examples/wordcount.yaml")
    add_config(p)
    p.add_argument("--debug", action="store_true", help="log at DEBUG (a start-up error's traceback included)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    compile_all(config, args.config)  # a pipeline that does not compile is a config error, before Spark starts
    logging.basicConfig(level="DEBUG" if args.debug else config.service.log_level, format=LOG_FORMAT)
    if not args.debug:
        for name, level in QUIET_UNLESS_DEBUG.items():
            logging.getLogger(name).setLevel(level)
    from app.service import Service

    return Service(config).run()
