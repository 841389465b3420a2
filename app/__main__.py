"""Command line: ``python -m app demo`` runs the embedded demo."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="word count over a generated stream, checked against what was produced")
    demo.add_argument("--records", type=int, default=20_000)
    demo.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from app.demo_memory import run

        return run(args.records, args.partitions)
    return 2


if __name__ == "__main__":
    sys.exit(main())
