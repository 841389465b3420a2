"""``run``: every pipeline of a config until SIGTERM/SIGINT (see :mod:`app.service.process`)."""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.common import add_config, compile_all, load_config, parser

SUMMARY = "run the pipelines of a config until SIGTERM/SIGINT"


def add(sub: Any) -> None:
    p = parser(sub, "run", SUMMARY, "python -m app run --config examples/wordcount.yaml")
    add_config(p)
    p.add_argument("--debug", action="store_true", help="log at DEBUG (a start-up error's traceback included)")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    compile_all(config, args.config)  # a pipeline that does not compile is a config error, before Spark starts
    from app.logs import configure

    configure(config.service.log_level, debug=args.debug)
    from app.service.process import Service

    return Service(config).run()
