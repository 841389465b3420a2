"""The key limits a backend reports (states.limits) say exactly what a real Cassandra refuses: checked key by
key against the server, so the pre-commit check and the database agree."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from states.factory import StateFactory
from states.limits import KeyProblem
from states.spec import Column, MapSpec, StateKind
from states.values import OpaqueValue
from tests.states.backends import cassandra_settings

ONE = MapSpec("one_key", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))
BLOB = MapSpec("blob_key", StateKind.OPAQUE, (Column("k", "blob"),), (Column("count", "bigint"),))
TWO = MapSpec("two_keys", StateKind.OPAQUE, (Column("a", "text"), Column("b", "bigint"), Column("c", "text")),
              (Column("count", "bigint"),))

CASES: list[tuple[MapSpec, tuple[Any, ...], KeyProblem | None]] = [
    (ONE, ("",), KeyProblem.EMPTY),
    (ONE, ("a",), None),
    (ONE, ("x" * 65535,), None),
    (ONE, ("x" * 65536,), KeyProblem.TOO_LONG),
    (ONE, ("é" * 32767,), None),  # 65534 bytes of UTF-8
    (ONE, ("é" * 32768,), KeyProblem.TOO_LONG),  # 65536 bytes, 32768 characters
    (BLOB, (b"",), KeyProblem.EMPTY),
    (BLOB, (b"\0" * 65535,), None),
    (BLOB, (b"\0" * 65536,), KeyProblem.TOO_LONG),
    (TWO, ("", 1, ""), None),  # empty parts of a composite key are stored
    (TWO, ("x" * 65515, 1, ""), None),  # 65515+3 + 8+3 + 0+3 = 65532
    (TWO, ("x" * 65518, 1, ""), None),  # 65535: the bound itself
    (TWO, ("x" * 65519, 1, ""), KeyProblem.TOO_LONG),
]


def test_sqlite_and_memory_have_no_key_limits(tmp_path: Any) -> None:
    """Only Cassandra refuses keys: an empty or long key is an ordinary key in SQLite."""
    assert StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "s.db")).key_limits(ONE) is None
    assert StateFactory(backend="memory").key_limits(ONE) is None


def checked_cases(settings: Any) -> Iterator[tuple[MapSpec, tuple[Any, ...], KeyProblem | None, Any]]:
    """Each case whose problem the factory's limits find as expected, with its table in ``settings``' layout."""
    from states.cassandra import CassandraBackingMap

    factory = StateFactory(backend="cassandra", cassandra=settings)
    maps = {spec: CassandraBackingMap(settings, spec) for spec in (ONE, BLOB, TWO)}
    for spec, key, expected in CASES:
        limits = factory.key_limits(spec)
        assert limits is not None
        assert limits.problem(key) is expected, (spec.table, len(key[0]), expected)
        yield spec, key, expected, maps[spec]


@pytest.mark.real_cassandra
def test_cassandra_limits_match_what_the_server_refuses(request: pytest.FixtureRequest) -> None:
    """For each key, the factory's limits find the problem we expect, and a real Cassandra refuses the
    key's row of a table with a partition per key exactly when they find one."""
    from cassandra import InvalidRequest

    for spec, key, expected, backing in checked_cases(cassandra_settings(request, "real", shards=0)):
        stmt, values, _, _ = backing.cas_request(key, None, OpaqueValue(1, 1, None))
        try:
            backing.client.session.execute(stmt, values)
            refused = False
        except InvalidRequest:
            refused = True
        assert refused is (expected is not None), (spec.table, len(key[0]), expected)


@pytest.mark.real_cassandra
def test_a_sharded_table_gets_the_same_limits_and_stores_every_key_they_pass(request: pytest.FixtureRequest) -> None:
    """A sharded table (the default layout) keeps its keys in clustering columns, which Cassandra checks less: it
    stores an empty key, and it *accepts* a key over 65535 bytes that its next flush then cannot write (the node
    fails every flush and schema change after it). So the limits are the same as a partition per key's, a key
    valid in one layout is valid in the other (``migrate`` meets no key its target refuses), and no key the
    limits refuse is ever sent: this test only sends the keys they pass, and each is stored."""
    for spec, key, expected, backing in checked_cases(cassandra_settings(request, "real", shards=4)):
        if expected is None:
            stmt, values, _, _ = backing.cas_request(key, None, OpaqueValue(1, 1, None))
            backing.client.session.execute(stmt, values)
            assert backing.multi_get([key])[0] == OpaqueValue(1, 1, None), (spec.table, len(key[0]))
