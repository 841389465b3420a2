"""A state kept on one machine (SQLite) is for local masters only: a cluster's executors would split it."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from app.config import parse
from app.spark.masters import is_local, state_refusal
from states.factory import StateFactory
from tests.service.test_config import ROOT, doc, error

LOCAL = ["local", "local[1]", "local[4]", "local[*]", "local[2,3]", "local[*,4]", " local[2] "]
CLUSTER = ["spark://127.0.0.1:7077", "spark://a:7077,b:7077", "k8s://https://kube:6443", "yarn", "mesos://m:5050",
           "local-cluster[2,1,1024]"]
CASSANDRA = {"contact_points": ["127.0.0.1"]}


@pytest.mark.parametrize("master", LOCAL)
def test_local_masters_are_local(master: str) -> None:
    assert is_local(master)


@pytest.mark.parametrize("master", CLUSTER)
def test_cluster_masters_are_not_local(master: str) -> None:
    assert not is_local(master)


def test_the_state_layer_says_which_backends_stay_on_one_machine() -> None:
    """SQLite is shared by the processes of one machine, not by machines; Cassandra by every process."""
    sqlite = StateFactory(backend="sqlite", sqlite_path="/tmp/x.db")
    memory = StateFactory(backend="memory")
    assert sqlite.shared_across_processes
    assert sqlite.on_one_machine
    assert not memory.shared_across_processes
    assert memory.on_one_machine
    assert state_refusal("cassandra", "spark://h:7077") is None
    assert state_refusal("sqlite", "local[2]") is None


@pytest.mark.parametrize("master", CLUSTER)
def test_sqlite_on_a_cluster_master_is_refused_at_the_backend(master: str) -> None:
    """The config names the field and says what to use instead."""
    e = error(doc(spark={"master": master}, pipelines__0__state__backend="sqlite"))
    assert e.path == "pipelines[0].state.backend", str(e)
    assert "one machine" in e.message, str(e)
    assert master in e.message, str(e)
    assert "use backend cassandra" in e.message, str(e)


@pytest.mark.parametrize("master", LOCAL)
def test_sqlite_on_a_local_master_is_valid(master: str) -> None:
    assert parse(doc(spark={"master": master}, pipelines__0__state__backend="sqlite"), {}).spark.master == master


@pytest.mark.parametrize("master", CLUSTER)
def test_cassandra_on_a_cluster_master_is_valid(master: str) -> None:
    d = doc(spark={"master": master}, cassandra=CASSANDRA, pipelines__0__state={"backend": "cassandra",
                                                                                 "table": "word_counts"})
    assert parse(d, {}).pipelines[0].state.backend == "cassandra"


def test_the_master_from_the_environment_is_checked_too() -> None:
    e = error(doc(spark={"master": "${MASTER}"}), {"MASTER": "spark://h:7077"})
    assert e.path == "pipelines[0].state.backend", str(e)


def test_validate_command_refuses_sqlite_on_a_cluster(tmp_path: Any) -> None:
    """Through the CLI: exit 2 naming the field, without starting Spark."""
    bad = tmp_path / "cluster.yaml"
    bad.write_text(yaml.safe_dump(doc(spark={"master": "spark://127.0.0.1:7077"})))
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "pipelines[0].state.backend: state backend sqlite keeps the state on one machine" in out.stderr


def test_demo_on_a_cluster_master_says_to_use_cassandra() -> None:
    """Refused before anything starts, with what to do instead (it crashed with 'no such table' before)."""
    out = subprocess.run([sys.executable, "-m", "app", "demo", "--master", "spark://127.0.0.1:1", "--records", "10"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "local master" in out.stderr, out.stderr
    assert "cassandra" in out.stderr, out.stderr


def test_the_spark_executor_refuses_sqlite_on_a_cluster_master() -> None:
    """A topology built in code (no config) meets the same rule when its executor is made."""
    from app.spark.batch_executor import SparkExecutor
    from app.topology.topology import Topology
    from spouts.kafka import KafkaSpout
    from tests.kafka.helpers import config
    from tests.spark.helpers import word_counts

    topology = Topology("reach")
    word_counts(topology.new_stream(KafkaSpout(config("127.0.0.1:1", topics=["t"]), "reach")),
                StateFactory(backend="sqlite", sqlite_path="/tmp/reach.db"))
    spark = SimpleNamespace(sparkContext=SimpleNamespace(master="spark://127.0.0.1:7077"))
    with pytest.raises(ValueError, match="keeps the state on one machine"):
        SparkExecutor(spark, topology)
