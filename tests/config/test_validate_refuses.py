"""What ``validate`` refuses from the config alone: each case passed ``validate`` before and failed only at run time."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
import yaml

from app.config import parse
from tests.service.test_config import ROOT, doc, error

SALES = [
    {"map": ["get_json_object(CAST(value AS STRING), '$.store') AS store",
             "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS DOUBLE) AS amount"]},
    {"filter": "store IS NOT NULL"},
]


@pytest.mark.parametrize(("changes", "path", "message"), [
    # fields the transforms do not produce
    ({"pipelines__0__group_by": ["wrd"]}, "pipelines[0].group_by[0]", "unknown column 'wrd'"),
    ({"pipelines__0__transforms": SALES, "pipelines__0__group_by": ["store"],
      "pipelines__0__aggregates": [{"sum": {"field": "amout", "as": "total"}}]},
     "pipelines[0].aggregates[0].sum.field", "unknown column 'amout'"),
    ({"pipelines__0__transforms": [], "pipelines__0__group_by": ["word"]}, "pipelines[0].group_by[0]",
     "unknown column 'word'"),
    # Spark SQL: syntax and resolution against the spout's schema and the earlier steps
    ({"pipelines__0__transforms": [{"map": ["explode(split(CAST(value AS STRING), ' ') AS word"]}]},
     "pipelines[0].transforms[0].map[0]", "not a valid Spark SQL expression"),
    ({"pipelines__0__transforms": [{"map": "explode(split(CAST(valu AS STRING), ' ')) AS word"}]},
     "pipelines[0].transforms[0].map", "unknown column 'valu'"),
    ({"pipelines__0__transforms__1": {"filter": "wrd <> ''"}}, "pipelines[0].transforms[1].filter",
     "unknown column 'wrd'"),
    ({"pipelines__0__transforms__1": {"filter": "word <>"}}, "pipelines[0].transforms[1].filter",
     "not a valid Spark SQL expression"),
    ({"pipelines__0__transforms__1": {"each": ["value AS raw"]}}, "pipelines[0].transforms[1].each[0]",
     "unknown column 'value'"),  # map replaced the columns: only word is left
    ({"pipelines__0__transforms__1": {"filter": "SELECT 1"}}, "pipelines[0].transforms[1].filter",
     "expected an expression"),
    # names the table layout reserves
    ({"pipelines__0__aggregates": [{"count": {"as": "prev_count"}}]}, "pipelines[0].aggregates[0].count.as",
     "prefix prev_ is reserved"),
    ({"pipelines__0__aggregates": [{"count": {"as": "txid"}}]}, "pipelines[0].aggregates[0].count.as",
     "invalid aggregate output column 'txid'"),
    ({"pipelines__0__transforms__0__map": ["explode(split(CAST(value AS STRING), ' ')) AS prev_word"],
      "pipelines__0__transforms__1__filter": "prev_word <> ''", "pipelines__0__group_by": ["prev_word"]},
     "pipelines[0].group_by[0]", "prefix prev_ is reserved"),
    # tables and keyspaces of the service and of Cassandra
    ({"pipelines__0__state__table": "trident_state"}, "pipelines[0].state.table", "reserved"),
    ({"pipelines__0__state__table": "trident_state_lease"}, "pipelines[0].state.table", "reserved"),
    ({"pipelines__0__state__table": "trident_table_owners"}, "pipelines[0].state.table", "reserved"),
    ({"cassandra": {"keyspace": "system"}}, "cassandra.keyspace", "Cassandra's own"),
    ({"cassandra": {"keyspace": "system_auth"}}, "cassandra.keyspace", "Cassandra's own"),
    # librdkafka checks names and values itself (a consumer is built, nothing connects)
    ({"kafka__properties": {"fetch.max.byts": 1048576}}, "kafka.properties.fetch.max.byts",
     "No such configuration property"),
    ({"kafka__properties": {"fetch.max.bytes": "lots"}}, "kafka.properties.fetch.max.bytes", "Invalid value"),
    # every cassandra value typed and bounded
    ({"cassandra": {"port": 99999}}, "cassandra.port", "<= 65535"),
    ({"cassandra": {"port": 0}}, "cassandra.port", ">= 1"),
    ({"cassandra": {"request_timeout_s": "abc"}}, "cassandra.request_timeout_s", "expected a number"),
    ({"cassandra": {"request_timeout_s": -1}}, "cassandra.request_timeout_s", "must be > 0"),
    ({"cassandra": {"connect_timeout_s": 0}}, "cassandra.connect_timeout_s", "must be > 0"),
    ({"cassandra": {"username": "u", "password": ["x"]}}, "cassandra.password", "expected a non-empty string"),
    ({"cassandra": {"create_keyspace": "no"}}, "cassandra.create_keyspace", "expected true or false"),
    ({"cassandra": {"tls": {"enabled": "maybe"}}}, "cassandra.tls.enabled", "expected true or false"),
    ({"cassandra": {"contact_points": [1]}}, "cassandra.contact_points[0]", "expected a non-empty string"),
    ({"cassandra": {"consistency": "MOST"}}, "cassandra.consistency", "not one of"),
    ({"cassandra": {"replication": {"class": ["x"]}}}, "cassandra.replication.class", "scalar"),
    # timeouts
    ({"kafka__request_timeout_s": 0}, "kafka.request_timeout_s", "must be > 0"),
    ({"kafka__read_timeout_s": -5}, "kafka.read_timeout_s", "must be > 0"),
    ({"pipelines__0__outage_limit_s": 0}, "pipelines[0].outage_limit_s", "must be > 0"),
    # a garbage broker address would look like a broker that is down, retried until the outage limit
    ({"kafka__bootstrap_servers": "kafka-0:9092,not an address"}, "kafka.bootstrap_servers", "'not an address'"),
    ({"kafka__bootstrap_servers": "kafka-0:99999"}, "kafka.bootstrap_servers", "not a broker address"),
    ({"kafka__bootstrap_servers": "kafka-0:9092,"}, "kafka.bootstrap_servers", "not a broker address"),
])
def test_validate_refuses(changes: dict[str, Any], path: str, message: str) -> None:
    """The config alone shows the mistake: refused at its path instead of failing after Spark started."""
    e = error(doc(**changes))
    assert e.path == path, str(e)
    assert message in e.message, str(e)


@pytest.mark.parametrize("servers", ["kafka-0:9092", "a:1,b:2", "SSL://k.example.com:9093", "[::1]:9092", "kafka"])
def test_broker_addresses_librdkafka_accepts_pass(servers: str) -> None:
    """Plain host:port lists, a protocol prefix, IPv6 in brackets and a host without a port are all valid."""
    assert parse(doc(kafka__bootstrap_servers=servers)).kafka.bootstrap_servers == servers


def test_the_outage_limit_reaches_the_coordinator() -> None:
    """``outage_limit_s`` from YAML is what the coordinator's failure policy uses; null rides outages out for ever."""
    from app.config import compile_pipeline

    for limit in (60.0, None):
        d = doc()
        d["pipelines"][0]["outage_limit_s"] = limit
        config = parse(d)
        assert compile_pipeline(config, config.pipelines[0]).coordinator.outage_limit_s == limit


def test_one_table_one_pipeline_within_a_config() -> None:
    """Two pipelines writing one table (same backend, same file) are refused, naming the other pipeline."""
    d = doc()
    second = dict(d["pipelines"][0], id="other")
    d["pipelines"].append(second)
    e = error(d)
    assert e.path == "pipelines[1].state.table"
    assert "'word_counts' is also written by pipeline 'word-count'" in e.message


def test_the_default_table_names_collide_too() -> None:
    """``state.table`` left out: the default name (id + group-by fields) is what is compared."""
    d = doc(pipelines__0__state__table=None, pipelines__0__id="a_b")
    d["pipelines"].append(dict(d["pipelines"][0], id="a-b"))  # a-b -> a_b_word as well
    assert "'a_b_word' is also written by pipeline 'a_b'" in error(d).message


def test_one_table_name_in_two_places_is_two_tables() -> None:
    """The same table name in two SQLite files is two tables: allowed."""
    d = doc()
    d["pipelines"].append(dict(d["pipelines"][0], id="other", state={"table": "word_counts",
                                                                     "sqlite_path": "/tmp/other.db"}))
    assert len(parse(d, {}).pipelines) == 2


@pytest.mark.parametrize(("text", "expected"), [("false", False), ("FALSE", False), ("true", True)])
def test_booleans_from_the_environment(text: str, expected: bool) -> None:
    """``create_keyspace: ${X:-false}`` is False, not the truthy string 'false'; the same for every boolean."""
    d = doc(cassandra={"create_keyspace": "${X:-" + text + "}", "tls": {"enabled": "${TLS}"}},
            pipelines__0__accept_at_least_once="${ALO:-" + text + "}")
    cfg = parse(d, {"TLS": text})
    assert cfg.cassandra is not None
    assert cfg.cassandra.create_keyspace is expected
    assert cfg.cassandra.tls.enabled is expected
    assert cfg.pipelines[0].accept_at_least_once is expected


def test_cassandra_values_arrive_typed_from_the_environment() -> None:
    """Numbers from ``${VAR}`` are numbers; the password is a Secret."""
    d = doc(cassandra={"port": "${PORT}", "request_timeout_s": "${T:-2.5}", "username": "u", "password": "${PW}"})
    c = parse(d, {"PORT": "9142", "PW": "pw"}).cassandra_settings()
    assert c is not None
    assert (c.port, c.request_timeout_s) == (9142, 2.5)
    assert c.password is not None
    assert c.password.get() == "pw"
    assert "pw" not in repr(c)


def test_resolution_stops_where_only_spark_could_name_a_column() -> None:
    """An unaliased expression's name is Spark's to choose: nothing after it is refused for a name."""
    d = doc(pipelines__0__transforms=[{"map": ["explode(split(CAST(value AS STRING), ' '))"]},
                                      {"filter": "col <> ''"}], pipelines__0__group_by=["col"])
    assert parse(d, {}).pipelines[0].group_by == ["col"]


def test_columns_resolve_case_insensitively_and_lambdas_and_structs_pass() -> None:
    """Spark resolves names case-insensitively; lambda parameters and struct fields are not columns."""
    d = doc(pipelines__0__transforms=[
        {"map": ["CAST(VALUE AS STRING) AS line", "transform(headers, h -> h.key) AS header_keys", "Topic"]},
        {"each": ["size(header_keys) AS n"]},
        {"filter": "line <> '' AND topic IS NOT NULL"},
        {"map": ["explode(split(line, ' ')) AS word", "n"]}])
    assert parse(d, {}).pipelines[0].group_by == ["word"]


def test_validate_command_exits_2_naming_the_column(tmp_path: Any) -> None:
    """Through the CLI: exit 2 and the field's path, without starting Spark."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc(pipelines__0__group_by=["wrd"])))
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "pipelines[0].group_by[0]: unknown column 'wrd'" in out.stderr


def test_certificate_files_are_the_machines_business() -> None:
    """librdkafka opens ``*.location`` files when a client is built; a config for a pod that mounts them
    validates on a machine without them (the names and other values are still checked)."""
    d = doc(kafka__properties={"security.protocol": "SSL", "ssl.ca.location": "/absent/ca.crt",
                               "ssl.certificate.location": "/absent/client.crt"})
    assert dict(parse(d, {}).kafka.properties)["ssl.ca.location"] == "/absent/ca.crt"


def test_a_cassandra_password_without_a_user_is_a_config_error(tmp_path: Any) -> None:
    """A password without a username was a traceback from the runtime settings; now exit 2 at the field."""
    d = doc(cassandra={"password": "pw"}, pipelines__0__state={"backend": "cassandra"})
    e = error(d)
    assert e.path == "cassandra.username"
    assert e.message.startswith("required with a password")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(d))
    out = subprocess.run([sys.executable, "-m", "app", "validate", "--config", str(bad)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert "cassandra.username: required with a password" in out.stderr


def test_a_runtime_check_the_models_lack_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a runtime object refuses at build time is reported at its pipeline, never as a traceback."""
    from app.coordinator import coordinator

    def refuse(self: Any) -> None:
        raise ValueError("a bound only the coordinator knows")

    monkeypatch.setattr(coordinator.CoordinatorConfig, "__post_init__", refuse)
    e = error(doc())
    assert (e.path, e.message) == ("pipelines[0]", "a bound only the coordinator knows")
