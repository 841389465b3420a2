"""Printing rows for people (an aligned table) or programs (JSON lines, CSV)."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO


def plain(v: Any) -> Any:
    """A JSON-able value: datetimes as ISO-8601, bytes as hex."""
    if isinstance(v, datetime):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def print_json(doc: Any, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    print(json.dumps(doc, indent=2, default=plain, ensure_ascii=False), file=out)


def print_csv(columns: Sequence[str], rows: Sequence[dict[str, Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for r in rows:
        w.writerow(["" if r.get(c) is None else plain(r.get(c)) for c in columns])


def print_table(columns: Sequence[str], rows: Sequence[dict[str, Any]], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip(), file=out)


def _cell(v: Any) -> str:
    return "-" if v is None else str(plain(v))
