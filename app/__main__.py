"""Command line of the service: ``python -m app COMMAND --help`` describes each command.

    python -m app run --config FILE        run the pipelines of a config until SIGTERM/SIGINT
    python -m app validate --config FILE   check a config and print the plan it compiles to
    python -m app demo                     word count on Spark over an in-process Kafka, checked
    python -m app topics plan|apply ...    the declared Kafka topics against the cluster
    python -m app status --config FILE     where every pipeline stands, without the service running
    python -m app query --config FILE ...  read a pipeline's state table
    python -m app rewind --config FILE ... move where a pipeline's next txid starts reading

Exit codes: 0 success; 1 a failed run, operation or demo mismatch; 2 a bad config or bad arguments;
3 refused (unsafe change, lease held, confirmation missing); 4 partly done (the cluster could not
answer part of it).
"""

from __future__ import annotations

import argparse
import sys

from app.commands import modules
from app.commands.common import CommandError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in modules():
        module.add(sub)  # type: ignore[attr-defined]
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except CommandError as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
