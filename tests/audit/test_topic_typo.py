"""The topic typo, as a user hits it today, on the real servers: caught by an audit.

A topic that does not exist is waited for and commits nothing (``tests/kafka/test_positions.py``), so the typo
that still does harm names another topic that exists (``sentence`` for ``sentences``, a staging copy, a topic
of another team): the pipeline counts that topic into its table. Once the config is corrected the pipeline
reads the right topic too, and the table holds both. The audit recounts what the config reads now and names
every key the wrong topic added, with the stored value and its txid. The ground truth is the words produced to
the right topic here, never what the pipeline stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands.backends import state_section
from tests.commands.helpers import cli, run_pipeline, words_of, write_config
from tests.kafka.fixtures import KafkaPeer, unique_topic
from tests.kafka.helpers import produce

pytestmark = pytest.mark.slow  # a Spark session for the audit


def _retarget(path: Path, topic: str) -> None:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["pipelines"][0]["spout"]["topics"] = [topic]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_topic_typo_corrected_later_is_caught_by_the_audit_naming_the_keys_it_added(
        kafka_peer: KafkaPeer, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    bootstrap = kafka_peer.bootstrap_servers()
    right = unique_topic("sentences")
    wrong = right.removesuffix(right[-1])  # one letter short: another team's topic that happens to exist
    kafka_peer.create_topic(right, 2)
    kafka_peer.create_topic(wrong, 1)
    good = produce(bootstrap, right, [(i % 2, f"w{i % 5} common".encode()) for i in range(60)])
    stray = produce(bootstrap, wrong, [(0, f"w{i % 2} stray{i % 3}".encode()) for i in range(12)])
    state, cassandra = state_section("sqlite", request, tmp_path)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=wrong, state=state, cassandra=cassandra,
                        spout={"topics": [wrong], "first_poll": "earliest", "discovery_interval_s": 0,
                               "caps": {"per_partition": 20, "per_batch": 30}})
    assert run_pipeline(path) >= 1  # the typo: the wrong topic's words are counted
    _retarget(path, right)  # corrected
    assert run_pipeline(path) > 1

    truth = words_of([r.value for r in good])
    added = words_of([r.value for r in stray])
    r = cli("audit", "--config", str(path), "--pipeline", "wc", "--json")
    assert r.code == 5, r.err + r.out
    report = json.loads(r.out)
    [table] = report["tables"]
    found = {k["key"][0]: (k["outcome"], k["expected"], k["stored"]) for k in table["keys"]}
    assert found == {
        **{w: ("differs", truth[w], truth[w] + n) for w, n in added.items() if w in truth},
        **{w: ("extra", None, n) for w, n in added.items() if w not in truth}}
    assert all(k["stored_txid"] is not None for k in table["keys"])
    assert [p["partition"] for p in report["left_out"]] == [f"{wrong}:0"]
