"""The YAML config: every class of error names its path; examples validate; config ≡ Python API."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.config import ConfigError, ServiceConfig, compile_pipeline, coordinator_config, describe, load, loads, parse
from app.coordinator.coordinator import CoordinatorConfig
from app.topology.topology import Agg, PersistentAggregate, Topology
from spouts.kafka import FirstPoll, KafkaSpout, KafkaSpoutConfig, TransactionalKafkaSpout
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy
from states.aggregators import Count, Max, Sum
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory
from states.spec import StateKind

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
SECRETS = {"TRIDENT_KAFKA_SASL_PASSWORD": "kafka-s3cret", "TRIDENT_CASSANDRA_PASSWORD": "cass-s3cret"}

BASE = """
kafka: {bootstrap_servers: "localhost:9092"}
pipelines:
  - id: word-count
    spout: {topics: [sentences]}
    transforms:
      - map: ["explode(split(CAST(value AS STRING), ' ')) AS word"]
      - filter: "word <> ''"
    group_by: [word]
    aggregates: [{count: {as: count}}]
    state: {backend: sqlite, sqlite_path: /tmp/x.db, table: word_counts}
"""


def doc(**changes: Any) -> dict[str, Any]:
    """BASE as a mapping, with dotted-path changes applied (``pipelines.0.state.table="x"``); None deletes."""
    d = yaml.safe_load(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
        key: Any = int(last) if isinstance(node, list) else last
        if value is None:
            del node[key]
        else:
            node[key] = value
    return d


def error(d: Any, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        parse(d, env or {})
    return e.value


@pytest.mark.parametrize(("changes", "path", "message"), [
    ({"pipelines__0__state__table": "Word Counts"}, "pipelines[0].state.table", "invalid table name 'Word Counts'"),
    ({"pipelines__0__state__tabel": "x"}, "pipelines[0].state.tabel", "unknown key"),
    ({"kafkaa": {}}, "kafkaa", "unknown key"),
    ({"kafka": None}, "kafka", "required"),
    ({"pipelines__0__spout": None}, "pipelines[0].spout", "required"),
    ({"pipelines__0__aggregates": None}, "pipelines[0].aggregates", "required"),
    ({"pipelines": []}, "pipelines", "at least one pipeline"),
    ({"pipelines__0__max_pending": 0}, "pipelines[0].max_pending", "must be >= 1"),
    ({"pipelines__0__max_pending": "two"}, "pipelines[0].max_pending", "expected an integer"),
    ({"pipelines__0__accept_at_least_once": "yes"}, "pipelines[0].accept_at_least_once", "expected true or false"),
    ({"pipelines__0__state": "sqlite"}, "pipelines[0].state", "expected a mapping"),
    ({"pipelines__0__group_by": "word"}, "pipelines[0].group_by", "expected a list"),
    ({"pipelines__0__group_by": ["Word"]}, "pipelines[0].group_by[0]", "invalid group-by field 'Word'"),
    ({"pipelines__0__id": "Word Count"}, "pipelines[0].id", "invalid pipeline id"),
    ({"pipelines__0__state__kind": "exactly"}, "pipelines[0].state.kind", "not one of opaque, transactional"),
    ({"pipelines__0__state__backend": "redis"}, "pipelines[0].state.backend", "not one of sqlite, cassandra"),
    ({"pipelines__0__state__backend": "cassandra"}, "pipelines[0].state.backend", "needs a top-level cassandra"),
    ({"pipelines__0__state__kind": "transactional"}, "pipelines[0].state.kind", "an opaque spout may replay"),
    ({"pipelines__0__state__kind": "non_transactional"}, "pipelines[0].state.kind", "accept_at_least_once"),
    ({"pipelines__0__spout__kind": "exact"}, "pipelines[0].spout.kind", "not one of opaque, transactional"),
    ({"pipelines__0__spout__topic_pattern": "s.*"}, "pipelines[0].spout", "exactly one of topics"),
    ({"pipelines__0__spout__topics": []}, "pipelines[0].spout", "exactly one of topics"),
    ({"pipelines__0__spout__topics": None, "pipelines__0__spout__topic_pattern": "(a"},
     "pipelines[0].spout.topic_pattern", "not a regular expression"),
    ({"pipelines__0__spout__topics": ["ok", "bad topic"]}, "pipelines[0].spout.topics[1]", "invalid topic name"),
    ({"pipelines__0__spout__first_poll": "timestamp"}, "pipelines[0].spout.first_poll_timestamp_ms", "needs it"),
    ({"pipelines__0__spout__first_poll": "newest"}, "pipelines[0].spout.first_poll", "not one of earliest"),
    ({"pipelines__0__spout__data_loss": "ignore"}, "pipelines[0].spout.data_loss", "not one of fail, skip"),
    ({"pipelines__0__spout__caps": {"per_partition": 0}}, "pipelines[0].spout.caps.per_partition", ">= 1"),
    ({"pipelines__0__spout__caps": {"per_txid": 5}}, "pipelines[0].spout.caps.per_txid", "unknown key"),
    ({"pipelines__0__transforms": [{"select": ["a"]}]}, "pipelines[0].transforms[0]", "a transform is one of"),
    ({"pipelines__0__transforms": [{"map": []}]}, "pipelines[0].transforms[0].map", "at least one"),
    ({"pipelines__0__transforms": [{"filter": ""}]}, "pipelines[0].transforms[0].filter", "Spark SQL expression"),
    ({"pipelines__0__transforms": [{"map": ["a", 3]}]}, "pipelines[0].transforms[0].map[1]", "Spark SQL expression"),
    ({"pipelines__0__aggregates": [{"avg": {"field": "x"}}]}, "pipelines[0].aggregates[0]", "an aggregate is one of"),
    ({"pipelines__0__aggregates": [{"sum": {"as": "total"}}]}, "pipelines[0].aggregates[0].sum.field", "required"),
    ({"pipelines__0__aggregates": [{"sum": {"field": "x", "as": "Total"}}]}, "pipelines[0].aggregates[0].sum.as",
     "invalid aggregate output column 'Total'"),
    ({"pipelines__0__aggregates": [{"count": {"field": "x"}}]}, "pipelines[0].aggregates[0].count.field",
     "unknown key"),
    ({"pipelines__0__aggregates": ["count", {"count": {}}]}, "pipelines[0].aggregates[0]", "used twice"),
    ({"pipelines__0__aggregates": [{"count": {"as": "word"}}]}, "pipelines[0].aggregates[0]", "used twice"),
    ({"kafka__properties": {"group.id": "mine"}}, "kafka.properties", "set by the spout"),
    ({"kafka__properties": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}},
     "kafka.properties.sasl.password", "TRIDENT_KAFKA_SASL_PASSWORD"),
    ({"kafka__properties": {"a": {"b": 1}}}, "kafka.properties.a", "must be a scalar"),
    ({"kafka__bootstrap_servers": ""}, "kafka.bootstrap_servers", "non-empty string"),
    ({"cassandra": {"keyspace": "Bad-Name"}}, "cassandra.keyspace", "invalid keyspace name"),
    ({"cassandra": {"port": "many"}}, "cassandra.port", "expected an integer"),
    ({"cassandra": {"contact": ["a"]}}, "cassandra.contact", "unknown key"),
    ({"cassandra": {"tls": {"enable": True}}}, "cassandra.tls.enable", "unknown key"),
    ({"cassandra": {"username": "u"}}, "cassandra.password", "TRIDENT_CASSANDRA_PASSWORD"),
    ({"http": {"port": 70000}}, "http.port", "<= 65535"),
    ({"service": {"log_level": "LOUD"}}, "service.log_level", "not one of DEBUG"),
    ({"spark": {"conf": {"spark.x": [1]}}}, "spark.conf.spark.x", "must be a scalar"),
])
def test_every_error_names_its_path(changes: dict[str, Any], path: str, message: str) -> None:
    """Each class of bad value is refused with the dotted path of the field and a message saying what is wrong."""
    e = error(doc(**changes))
    assert e.path == path, str(e)
    assert message in e.message, str(e)
    assert str(e).startswith(f"{path}: ")


def test_the_table_name_error_reads_as_documented() -> None:
    """The error a user sees for a bad table name is one line: path, value, and the rule."""
    e = error(doc(pipelines__0__state__table="Word Counts"))
    assert str(e).startswith("pipelines[0].state.table: invalid table name 'Word Counts': use 1-48 lower-case")


def test_duplicate_pipeline_ids_are_refused() -> None:
    """Two pipelines with one id would share a lease and a resume position."""
    d = doc()
    d["pipelines"].append(dict(d["pipelines"][0]))
    e = error(d)
    assert e.path == "pipelines[1].id"
    assert "duplicate pipeline id 'word-count'" in e.message


def test_yaml_syntax_and_missing_files_are_config_errors(tmp_path: Path) -> None:
    """Unreadable input is a ConfigError too, so the CLI reports it the same way."""
    with pytest.raises(ConfigError, match="not valid YAML"):
        loads("kafka: [unclosed")
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(tmp_path / "absent.yaml")


def test_environment_references_are_interpolated_and_missing_ones_named() -> None:
    """``${NAME}`` and ``${NAME:-default}`` read the environment; an unset name without default is an error."""
    d = doc(kafka__bootstrap_servers="${BROKERS}", pipelines__0__max_pending="${PENDING:-3}")
    cfg = parse(d, {"BROKERS": "k1:9092,k2:9092"})
    assert cfg.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert cfg.pipelines[0].max_pending == 3
    e = error(d)
    assert e.path == "kafka.bootstrap_servers"
    assert "environment variable BROKERS is not set" in e.message


def test_secrets_come_from_the_environment_and_never_show() -> None:
    """TRIDENT_* variables override secrets; reprs, the compiled spout and the printed plan redact them."""
    d = doc(kafka__properties={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                               "sasl.password": "in-file"},
            cassandra={"username": "app", "password": "in-file-too"})
    cfg = parse(d, SECRETS)
    assert dict(cfg.kafka.properties)["sasl.password"] == "kafka-s3cret"
    cassandra = cfg.cassandra_settings()
    assert cassandra is not None
    assert cassandra.password is not None
    assert cassandra.password.get() == "cass-s3cret"
    compiled = compile_pipeline(cfg, "word-count")
    shown = " ".join([repr(cfg), repr(compiled.topology.spout), repr(compiled.state),
                      str(describe(compiled.topology, compiled.coordinator))])
    for secret in ("kafka-s3cret", "cass-s3cret", "in-file"):
        assert secret not in shown
    spout = compiled.topology.spout
    assert isinstance(spout, KafkaSpout)
    assert spout.config.consumer_config("word-count")["sasl.password"] == "kafka-s3cret"


def test_defaults_fill_a_minimal_pipeline() -> None:
    """Only the kafka section, an id, a spout and aggregates are required; the rest has documented defaults."""
    cfg = parse({"kafka": {"bootstrap_servers": "b:9092"},
                 "pipelines": [{"id": "p", "spout": {"topics": ["t"]}, "aggregates": ["count"]}]}, {})
    p = cfg.pipelines[0]
    assert (p.state.kind, p.state.backend, p.state.sqlite_path, p.state.cache_size) == \
        (StateKind.OPAQUE, "sqlite", "data/trident.db", 10_000)
    coordinator = coordinator_config(cfg, p)
    assert (coordinator.max_pending, coordinator.accept_at_least_once, coordinator.lease_ttl_s, coordinator.caps) == \
        (2, False, 30.0, Caps())
    assert (cfg.http.port, cfg.spark.master, cfg.service.shutdown_grace_s) == (9400, "local[*]", 30.0)
    c = compile_pipeline(cfg, p)
    sink = c.topology.sinks[0][1]
    assert isinstance(sink, PersistentAggregate)
    assert sink.name == "p"
    assert sink.group_by == ()  # a global aggregate


PLAIN_TEXT = {"wordcount-local.yaml"}  # no password anywhere: a secret in the environment would be a mistake


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path: Path) -> None:
    """Every shipped example parses, compiles, and passes ``python -m app validate`` (a plain-text one with no
    secret in the environment, as a new user runs it)."""
    secrets = {} if path.name in PLAIN_TEXT else SECRETS
    cfg = load(path, secrets)
    for p in cfg.pipelines:
        compile_pipeline(cfg, p)
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(path)], cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", **secrets}, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "valid" in out.stderr
    assert "kafka-s3cret" not in out.stdout + out.stderr


def test_validate_command_reports_the_path_and_exits_non_zero(tmp_path: Path) -> None:
    """A bad config makes ``validate`` exit 2 with the path of the bad field on stderr."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc(pipelines__0__state__table="Word Counts")))
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "pipelines[0].state.table: invalid table name 'Word Counts'" in out.stderr


def test_sales_example_compiles_to_sum_and_max_of_a_json_field() -> None:
    """sales.yaml is a different aggregation: count, sum and max of a JSON amount per store, transactional spout."""
    cfg = load(ROOT / "examples" / "sales.yaml", SECRETS)
    c = compile_pipeline(cfg, "sales")
    stream, sink = c.topology.sinks[0]
    assert isinstance(c.topology.spout, TransactionalKafkaSpout)
    assert isinstance(sink, PersistentAggregate)
    assert sink.group_by == ("store",)
    assert [(type(a.aggregator), a.input, a.output) for a in sink.aggregates] == \
        [(Count, None, "orders"), (Sum, "amount", "total"), (Max, "amount", "biggest")]
    assert any("$.amount" in e for t in stream.transforms for e in t.exprs)


def test_config_and_python_api_build_equal_plans() -> None:
    """The YAML and the equivalent Python API calls compile to equal topologies, coordinator settings and states."""
    text = """
    kafka:
      bootstrap_servers: "k:9092"
      properties: {fetch.max.bytes: 1048576}
    cassandra: {contact_points: [c1, c2], keyspace: shop}
    service: {owner: pod-0}
    pipelines:
      - id: sales
        spout:
          kind: transactional
          topic_pattern: "orders\\\\..*"
          first_poll: earliest
          caps: {per_partition: 1000, per_batch: 4000}
          data_loss: skip
          discovery_interval_s: 5
          group_id: mon
        transforms:
          - map: ["get_json_object(CAST(value AS STRING), '$.store') AS store",
                  "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE) AS amount"]
          - each: ["amount * 2 AS double_amount"]
          - filter: "store IS NOT NULL"
        group_by: [store]
        aggregates:
          - count: {as: orders}
          - sum: {field: amount, as: total}
          - max: {field: amount, as: biggest}
        state: {kind: opaque, backend: cassandra, table: sales_by_store, cache_size: 500}
        max_pending: 3
        lease_ttl_s: 20
    """
    cfg: ServiceConfig = loads(text, {})
    from_config = compile_pipeline(cfg, "sales")

    spout_config = KafkaSpoutConfig("k:9092", topic_pattern=r"orders\..*", first_poll=FirstPoll.EARLIEST,
                                    data_loss=DataLossPolicy.SKIP, discovery_interval_s=5, group_id="mon",
                                    properties={"fetch.max.bytes": "1048576"})
    state = StateFactory(kind=StateKind.OPAQUE, backend="cassandra",
                         cassandra=CassandraSettings(contact_points=("c1", "c2"), keyspace="shop"), cache_size=500)
    topology = Topology("sales")
    (topology.new_stream(TransactionalKafkaSpout(spout_config, "sales"))
     .map("get_json_object(CAST(value AS STRING), '$.store') AS store",
          "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE) AS amount")
     .each("amount * 2 AS double_amount")
     .filter("store IS NOT NULL")
     .group_by("store")
     .persistent_aggregate(state, [Agg(Count(), "orders"), Agg(Sum(), "total", "amount"),
                                   Agg(Max(), "biggest", "amount")], name="sales_by_store"))
    coordinator = CoordinatorConfig(caps=Caps(1000, 4000), max_pending=3, lease_ttl_s=20, owner="pod-0")

    assert describe(from_config.topology, from_config.coordinator) == describe(topology, coordinator)
    assert from_config.coordinator == coordinator
    assert from_config.state == state
    assert isinstance(from_config.topology.spout, KafkaSpout)
    assert from_config.topology.spout.config == spout_config
    (s1, sink1), (s2, sink2) = from_config.topology.sinks[0], topology.sinks[0]
    assert s1.transforms == s2.transforms
    assert sink1 == sink2
    assert coordinator_config(cfg, cfg.pipelines[0]) == coordinator


def test_word_count_config_matches_the_python_api_with_an_opaque_spout() -> None:
    """The BASE word count: opaque KafkaSpout, sqlite state, an owner unique per process, same transforms."""
    cfg = parse(doc(), {})
    c = compile_pipeline(cfg, "word-count")
    state = StateFactory(sqlite_path="/tmp/x.db")
    topology = Topology("word-count")
    (topology.new_stream(KafkaSpout(KafkaSpoutConfig("localhost:9092", topics=("sentences",)), "word-count"))
     .map("explode(split(CAST(value AS STRING), ' ')) AS word").filter("word <> ''")
     .group_by("word").persistent_aggregate(state, [Agg(Count(), "count")], name="word_counts"))
    assert c.coordinator.owner.startswith(f"{socket.gethostname()}-")  # plus pid and random: unique per process
    assert describe(c.topology, c.coordinator) == describe(topology, CoordinatorConfig(max_pending=2,
                                                                                       owner=c.coordinator.owner))
