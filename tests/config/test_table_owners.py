"""A state table belongs to one pipeline: a second topology claiming it is refused, naming both, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import compile_pipeline, parse
from states.factory import StateFactory
from states.ownership import TableOwnedError, check_claimable, claim_table
from tests.service.test_config import doc
from tests.states.backends import behaviour_kind, cassandra_settings

BACKENDS = ["memory", "sqlite", "cassandra"]  # cassandra: the real one when the run has one (behaviour_kind)


def factory(request: pytest.FixtureRequest, backend: str, tmp_path: Any) -> StateFactory:
    if backend == "memory":
        return StateFactory(backend="memory", cache_size=0, sqlite_path=str(tmp_path))  # a distinct factory per test
    if backend == "sqlite":
        return StateFactory(backend="sqlite", sqlite_path=str(tmp_path / "state.db"))
    return StateFactory(backend="cassandra", cassandra=cassandra_settings(request, behaviour_kind(request)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_second_topology_is_refused_naming_both(request: pytest.FixtureRequest, backend: str, tmp_path: Any) -> None:
    """The first claim wins; the owner may claim again (a restart); another topology gets a permanent error."""
    f = factory(request, backend, tmp_path)
    claim_table(f, "word_counts", "word-count")
    claim_table(f, "word_counts", "word-count")  # the same pipeline restarting
    with pytest.raises(TableOwnedError) as e:
        claim_table(f, "word_counts", "other-count")
    assert (e.value.table, e.value.owner, e.value.claimant) == ("word_counts", "word-count", "other-count")
    assert "'word-count'" in str(e.value)
    assert "'other-count'" in str(e.value)
    claim_table(f, "other_counts", "other-count")  # another table is free
    with pytest.raises(TableOwnedError):  # and still refused on a second try: nothing changed
        claim_table(f, "word_counts", "other-count")


def test_sqlite_claims_survive_the_process(tmp_path: Any) -> None:
    """Two services (two configs, one file) with different pipeline ids: the second one's start-up is refused."""
    db = str(tmp_path / "state.db")
    first = parse(doc(pipelines__0__state__sqlite_path=db), {})
    second = parse(doc(pipelines__0__state__sqlite_path=db, pipelines__0__id="counts-v2"), {})
    compile_pipeline(first, "word-count").claim_tables()
    with pytest.raises(TableOwnedError, match="belongs to pipeline 'word-count'; pipeline 'counts-v2'"):
        compile_pipeline(second, "counts-v2").claim_tables()
    compile_pipeline(first, "word-count").claim_tables()


def test_store_tables_cannot_be_claimed() -> None:
    """The store's own tables are never a pipeline's state."""
    for name in ("trident_state", "trident_state_lease", "trident_table_owners"):
        with pytest.raises(ValueError, match="reserved"):
            check_claimable(name)


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_claim_outcome_is_resolved_by_a_serial_read(request: pytest.FixtureRequest, applied: bool) -> None:
    """A claim whose LWT times out is settled by a serial read: applied, it is ours; not applied (no row), it is
    sent again. Either way the claimant owns the table and another topology is still refused."""
    from tests.cqlserver.faults import Fault
    from tests.states.backends import cassandra_peer

    server = cassandra_peer(request, "cqlserver").server
    assert server is not None
    f = StateFactory(backend="cassandra", cassandra=cassandra_settings(request, "cqlserver"))
    claim_table(f, "warm_up", "word-count")  # the owners table exists before the fault is armed
    fault = server.inject(Fault.write_timeout_cas(applied=applied, table="trident_table_owners"))
    try:
        claim_table(f, "word_counts", "word-count")
    finally:
        server.clear_faults()
    assert fault.fired == 1
    with pytest.raises(TableOwnedError, match="belongs to pipeline 'word-count'"):
        claim_table(f, "word_counts", "other-count")
