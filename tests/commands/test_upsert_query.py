"""``query`` on an upsert table: a key deleted by a tombstone is reported as not found, like a key never written."""

from __future__ import annotations

import json
from pathlib import Path

from states.aggregators import Latest, combine_updater
from states.opaque import OpaqueMap
from states.spec import DELETED_COLUMN, Column, MapSpec, StateKind
from states.sqlite import SqliteBackingMap
from states.stamped import Stamped
from tests.commands.helpers import cli, write_config

SPEC = MapSpec("accounts", StateKind.OPAQUE, (Column("word", "text"),),
               (Column("amount", "bigint", stamped=True), Column(DELETED_COLUMN, "boolean", stamped=True)),
               tombstones=True)


class Pair:
    def combine(self, a: object, b: object) -> object:
        return tuple(Latest().combine(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]


def test_query_leaves_deleted_keys_out(tmp_path: Path) -> None:
    """After a tombstone deletes 'gone', --key reports it absent and --top leaves it out; 'kept' reads typed."""
    db = tmp_path / "s.db"
    path = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="t",
                        state={"backend": "sqlite", "sqlite_path": str(db), "table": "accounts", "tombstones": "delete"},
                        aggregates=[{"latest": {"field": "word", "as": "amount"}}])
    backing = SqliteBackingMap(db, SPEC)
    state = OpaqueMap(backing)
    for txid, key, offset, amount in ((1, "gone", 1, 50), (1, "kept", 2, 7), (2, "gone", 3, None)):
        state.begin_commit(txid)
        partial = (Stamped(0, 0, offset, amount), Stamped(0, 0, offset, amount is None))
        state.multi_update([(key,)], [combine_updater(Pair(), partial)])  # type: ignore[arg-type]
        state.commit(txid)
    backing.close()
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--key", "gone", "--key", "kept", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"word": "kept", "txid": 1, "amount": 7, "deleted": False}]
    assert "key 'gone': not in table 'accounts' (never written, or deleted)" in r.err
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "5", "--json")
    assert r.code == 0, r.err
    assert [row["word"] for row in json.loads(r.out)] == ["kept"]
