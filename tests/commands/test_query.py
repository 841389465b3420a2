"""``query``: typed rows by key and the top N, from SQLite and Cassandra, as a table, JSON or CSV."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from app.config import compile_pipeline, load
from states.cassandra.reader import CassandraTableReader
from states.cassandra.shards import DEFAULT_SHARDS
from states.values import OpaqueValue
from tests.commands.backends import SHARDS, STATE_BACKENDS, state_section
from tests.commands.helpers import WORDS_SPEC, cli, write_config
from tests.states.backends import cassandra_peer, cassandra_settings

COUNTS = {f"w{i:03d}": (i * 37) % 101 + 1 for i in range(60)}  # distinct keys, repeated counts (ties)


def seeded(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A config whose word_counts table holds COUNTS (written as the opaque map writes them, txid 5)."""
    state, cassandra = state_section(backend, request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="t", state=state, cassandra=cassandra)
    factory = compile_pipeline(load(path), "wc").state
    if backend != "sqlite":
        shards = SHARDS[backend]
        assert factory.shards_of("word_counts") == (DEFAULT_SHARDS if shards is None else shards)
    words = sorted(COUNTS)
    factory.backing_map(WORDS_SPEC).multi_put([(w,) for w in words],
                                              [OpaqueValue(5, COUNTS[w], COUNTS[w] - 1) for w in words])
    return path


@pytest.mark.parametrize("backend", STATE_BACKENDS)
def test_query_by_key_and_top(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Keys read typed values (absent keys reported, not invented); --top orders by the value, largest first."""
    path = seeded(backend, request, tmp_path)
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--key", "w001", "--key", "word=w007",
            "--key", "nope", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"word": "w001", "txid": 5, "count": COUNTS["w001"]},
                                 {"word": "w007", "txid": 5, "count": COUNTS["w007"]}]
    assert "key 'nope': not in table 'word_counts'" in r.err

    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "5", "--by", "count", "--csv")
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "word,txid,count"
    got = [(w, int(c)) for w, _, c in (line.split(",") for line in lines[1:])]
    assert [c for _, c in got] == sorted(COUNTS.values(), reverse=True)[:5]
    assert all(COUNTS[w] == c for w, c in got)

    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "3")
    assert r.code == 0
    assert r.out.splitlines()[0].split() == ["word", "txid", "count"]
    assert len(r.out.splitlines()) == 2 + 3


@pytest.mark.parametrize("backend", STATE_BACKENDS)
def test_reader_top_matches_a_sort_of_every_row(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The top N equals sorting the whole table, also when Cassandra's scan spans many small pages."""
    path = seeded(backend, request, tmp_path)
    factory = compile_pipeline(load(path), "wc").state
    reader = factory.reader()
    if isinstance(reader, CassandraTableReader):
        reader.page_size = 7  # 60 rows: 9 pages
    seen: list[int] = []
    top = reader.top(WORDS_SPEC, 10, "count", seen.append)
    assert [r["count"] for r in top] == sorted(COUNTS.values(), reverse=True)[:10]
    assert all(COUNTS[r["word"]] == r["count"] for r in top)
    assert seen
    assert seen[-1] == (60 if backend != "sqlite" else 10)
    keys = random.Random(3).sample(sorted(COUNTS), 9)
    assert [(r or {})["count"] for r in reader.get(WORDS_SPEC, [(k,) for k in keys])] == [COUNTS[k] for k in keys]


@pytest.mark.parametrize("backend", ["cassandra-sharded", "cassandra-per-key"])
def test_a_config_without_shards_reads_a_table_in_its_own_layout(backend: str, request: pytest.FixtureRequest,
                                                                  tmp_path: Path) -> None:
    """A table created with 4 shards or a partition per key (neither the default), queried through a config that
    leaves cassandra.shards unset: the keys and the top are read in the table's own layout (the config need not
    know it)."""
    path = seeded(backend, request, tmp_path)
    doc = yaml.safe_load(path.read_text())
    del doc["cassandra"]["shards"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--key", "w001", "--key", "w059", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"word": w, "txid": 5, "count": COUNTS[w]} for w in ("w001", "w059")]
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "3", "--json")
    assert r.code == 0, r.err
    assert [row["count"] for row in json.loads(r.out)] == sorted(COUNTS.values(), reverse=True)[:3]


def test_query_errors_name_the_object(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Unknown pipeline, unknown --by column, a table never written: exit codes 2, 2, 1 with the name."""
    path = seeded("sqlite", request, tmp_path)
    r = cli("query", "--config", str(path), "--pipeline", "other")
    assert r.code == 2
    assert "--pipeline 'other': no such pipeline" in r.err
    assert "known: wc" in r.err
    r = cli("query", "--config", str(path), "--pipeline", "wc", "--top", "3", "--by", "votes")
    assert r.code == 2
    assert "--by 'votes'" in r.err
    assert "word, txid, count" in r.err
    empty = write_config(tmp_path / "e.yaml", bootstrap="127.0.0.1:1", topic="t",
                         state={"backend": "sqlite", "sqlite_path": str(tmp_path / "none.db")})
    r = cli("query", "--config", str(empty), "--pipeline", "wc", "--top", "3")
    assert r.code == 1
    assert "table 'word_counts' does not exist yet" in r.err
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("group_by", "group_bye"))
    r = cli("query", "--config", str(bad), "--pipeline", "wc")
    assert r.code == 2
    assert "pipelines[0].group_bye: unknown key" in r.err


def test_cassandra_reads_use_the_configured_consistency(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Every read of the table, by key and by scan, is sent at the config's consistency (here ONE)."""
    peer = cassandra_peer(request, "cqlserver")
    settings = cassandra_settings(request, "cqlserver")
    path = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="t", state={"backend": "cassandra"},
                        cassandra=settings, cassandra_extra={"consistency": "ONE"})
    factory = compile_pipeline(load(path), "wc").state
    factory.backing_map(WORDS_SPEC).multi_put([("a",), ("b",)], [OpaqueValue(1, 3, 2), OpaqueValue(1, 4, 3)])
    peer.server.reset_counts()
    assert cli("query", "--config", str(path), "--pipeline", "wc", "--key", "a", "--json").code == 0
    assert cli("query", "--config", str(path), "--pipeline", "wc", "--top", "1", "--json").code == 0
    reads = [r for r in peer.server.request_log() if f"{settings.keyspace}.word_counts" in r.tables
             and r.kind == "select" and r.opcode != "PREPARE"]
    assert len(reads) >= 2
    assert {r.consistency for r in reads} == {"ONE"}
