"""``query``: read a pipeline's state table (Cassandra or SQLite), typed, by key or the top N.

Reads go through the backend's :mod:`states.reader` (Cassandra at the configured consistency).
Cassandra has no ORDER BY across partitions: ``--top`` scans the table page by page and keeps
the N largest rows in memory (progress on stderr), so it costs a full read of the table.
"""

from __future__ import annotations

import argparse
from typing import Any

from app.commands.common import (
    BAD_INPUT,
    FAILED,
    OK,
    CommandError,
    add_config,
    load_config,
    parser,
    pipeline_of,
    progress,
)
from app.commands.output import print_csv, print_json, print_table
from app.topology.key_text import KeyTextError, parse_key

SUMMARY = "read a pipeline's state table by key, or its top N rows"


def add(sub: Any) -> None:
    p = parser(sub, "query", SUMMARY,
               "python -m app query --config examples/wordcount.yaml --pipeline word-count --top 10 --by count")
    add_config(p)
    p.add_argument("--pipeline", required=True, metavar="ID", help="the pipeline whose table to read")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--key", action="append", metavar="K",
                      help="a key to read (repeatable); several key columns: 'col=v,col=v' or 'v1,v2' in order")
    what.add_argument("--top", type=int, metavar="N", help="the N rows with the largest --by value (default 10)")
    p.add_argument("--by", metavar="COL", help="the column --top orders by (default: the first value column)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="a JSON list of rows")
    fmt.add_argument("--csv", action="store_true", help="CSV with a header line")
    p.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from app.config import compile_pipeline
    from app.query import stored_spec
    from states.reader import visible_columns
    from states.snapshottable import GLOBAL_KEY, GLOBAL_KEY_COLUMN

    config = load_config(args.config)
    p = pipeline_of(config, args.pipeline)
    sink = compile_pipeline(config, p).topology.sinks[0][1]
    if args.top is not None and args.top < 1:
        msg = "--top: must be >= 1"
        raise CommandError(msg, BAD_INPUT)
    try:
        spec = stored_spec(sink)
    except LookupError as e:
        msg = f"pipeline {p.id!r}: {e}"
        raise CommandError(msg, FAILED) from None
    reader = sink.factory.reader()
    columns = [n for n, _ in visible_columns(spec)]
    if args.key:
        try:
            keys = [parse_key(spec, k) for k in args.key]
        except KeyTextError as e:
            raise CommandError(str(e), BAD_INPUT) from None
        found = reader.get(spec, keys)
        missing = [k for k, r in zip(args.key, found, strict=True) if r is None]
        rows = [r for r in found if r is not None]
        for k in missing:
            progress(f"key {k!r}: not in table {spec.table!r} (never written{', or deleted' if spec.tombstones else ''})")
    elif [c.name for c in spec.key] == [GLOBAL_KEY_COLUMN] and args.top is None:
        rows = [r for r in reader.get(spec, [GLOBAL_KEY]) if r is not None]
    else:
        by = args.by or spec.value[0].name
        if by not in columns:
            msg = f"--by {by!r}: table {spec.table!r} has no such column (columns: {', '.join(columns)})"
            raise CommandError(msg,
                               BAD_INPUT)
        scanned = ProgressEvery(f"scanning {spec.table}")
        rows = reader.top(spec, args.top or 10, by, scanned)
    if args.json:
        print_json(rows)
    elif args.csv:
        print_csv(columns, rows)
    else:
        print_table(columns, rows)
    return OK


class ProgressEvery:
    """Reports rows scanned on stderr at most every 10 000 rows (a Cassandra --top reads the whole table)."""

    def __init__(self, what: str) -> None:
        self.what, self.reported = what, 0

    def __call__(self, scanned: int) -> None:
        if scanned - self.reported >= 10_000:
            progress(f"{self.what}: {scanned} rows")
            self.reported = scanned
