"""``validate`` refuses a consistency pair that loses exactly-once on the replication ``create_keyspace`` creates,
unless ``cassandra.accept_weak_consistency`` accepts it (states.cassandra.guarantees has the rule)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import parse
from tests.service.test_config import ROOT, doc, error

RF3 = {"class": "SimpleStrategy", "replication_factor": 3}
TWO_DCS = {"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": 3}


def cassandra_doc(**cassandra: Any) -> dict[str, Any]:
    return doc(cassandra=cassandra, pipelines__0__state={"backend": "cassandra", "table": "word_counts"})


@pytest.mark.parametrize(("cassandra", "path", "needle"), [
    ({"consistency": "ONE", "replication": RF3}, "cassandra.consistency", "ONE waits for 1 of the 3 replicas"),
    ({"consistency": "one", "replication": RF3}, "cassandra.consistency", "not a majority (2)"),  # any case
    ({"consistency": "LOCAL_ONE", "replication": {"class": "NetworkTopologyStrategy", "dc1": 3}},
     "cassandra.consistency", "LOCAL_ONE waits for 1 of the 3 replicas"),
    ({"consistency": "LOCAL_QUORUM", "serial_consistency": "SERIAL", "replication": TWO_DCS},
     "cassandra.consistency", "replicated in 2 data centres"),
    ({"consistency": "QUORUM", "serial_consistency": "LOCAL_SERIAL", "replication": TWO_DCS},
     "cassandra.serial_consistency", "LOCAL_SERIAL runs Paxos among one data centre's replicas"),
])
def test_a_weak_pair_is_refused_at_its_setting_with_the_opt_in_named(cassandra: dict[str, Any], path: str,
                                                                     needle: str) -> None:
    e = error(cassandra_doc(**cassandra))
    assert e.path == path, str(e)
    assert needle in e.message, e.message
    assert "from cassandra.replication" in e.message, e.message
    assert e.message.endswith("or set cassandra.accept_weak_consistency: true to run without this guarantee")
    accepted = parse(cassandra_doc(**cassandra, accept_weak_consistency=True), {}).cassandra_settings()
    assert accepted is not None
    assert accepted.accept_weak_consistency is True


@pytest.mark.parametrize("cassandra", [
    {"consistency": "ONE"},  # the default replication: SimpleStrategy, RF 1 (the test servers)
    {"consistency": "ONE", "replication": {"class": "SimpleStrategy", "replication_factor": 1}},
    {"consistency": "LOCAL_QUORUM", "replication": RF3},
    {"consistency": "TWO", "replication": RF3},
    {"consistency": "QUORUM", "serial_consistency": "SERIAL", "replication": TWO_DCS},
    {"consistency": "ONE", "replication": RF3, "create_keyspace": False},  # replication unknown: `run` judges it
    {"consistency": "ONE", "replication": RF3, "accept_weak_consistency": "${WEAK}"},  # true from the environment
])
def test_pairs_that_hold_or_cannot_be_judged_yet_pass(cassandra: dict[str, Any]) -> None:
    assert parse(cassandra_doc(**cassandra), {"WEAK": "true"}).cassandra is not None


@pytest.mark.parametrize(("cassandra", "needle"), [
    ({"consistency": "ANY"}, "Cassandra refuses reads at ANY"),
    ({"consistency": "THREE", "replication": {"class": "SimpleStrategy", "replication_factor": 2}},
     "every request would fail"),
    ({"consistency": "LOCAL_QUORUM", "local_dc": "dc2", "replication": {"class": "NetworkTopologyStrategy", "dc1": 3}},
     "'dc2', which holds none of the keyspace"),
])
def test_the_opt_in_does_not_make_a_level_that_cannot_work_work(cassandra: dict[str, Any], needle: str) -> None:
    e = error(cassandra_doc(**cassandra, accept_weak_consistency=True))
    assert e.path == "cassandra.consistency", str(e)
    assert needle in e.message, e.message
    assert "accept_weak_consistency" not in e.message


def _validate(tmp_path: Path, d: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(d))
    return subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_validate_exits_2_with_one_line_and_passes_with_the_opt_in(tmp_path: Path) -> None:
    """Through the CLI: `consistency: ONE` on RF 3 is exit 2, one line naming the setting, the replication and the
    opt-in; with `accept_weak_consistency: true` the same config is valid."""
    weak = cassandra_doc(consistency="ONE", replication=RF3)
    out = _validate(tmp_path, weak)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if "cassandra.consistency" in line]
    assert len(lines) == 1, out.stderr
    assert "ONE waits for 1 of the 3 replicas (SimpleStrategy, replication factor 3, from cassandra.replication)" \
        in lines[0]
    assert "cassandra.accept_weak_consistency: true" in lines[0]
    weak["cassandra"]["accept_weak_consistency"] = True
    ok = _validate(tmp_path, weak)
    assert ok.returncode == 0, ok.stderr
