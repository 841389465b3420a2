"""``run`` judges the consistency pair on the keyspace as the cluster has it, before Spark starts (app.service.access).

``validate`` only knows the replication ``create_keyspace`` would create; a keyspace made by a DBA (or since)
is only known to the start-up check: refused with exit 2 and one line, or run with one warning under
``cassandra.accept_weak_consistency``. On the CQL test server (one node, RF 1) ``consistency: ONE`` still runs.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from cassandra.metadata import NetworkTopologyStrategy, SimpleStrategy
from prometheus_client import CollectorRegistry

from app.config import parse
from app.failures.policy import BAD_INPUT
from app.metrics import Metrics
from app.service import access
from app.service.access import StartupError, check_access, check_consistency, driver_local_dc
from states.cassandra.session import shared_client
from states.cassandra.settings import CassandraSettings
from tests.service.test_config import doc
from tests.states.backends import cassandra_peer


def _client(keyspaces: dict[str, Any], local_dc: str | None = "datacenter1") -> Any:
    """A stand-in for the driver's client: only what the check reads (metadata and the routing policy)."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT
    from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy

    from states.cassandra.routing import AvoidUnanswering, Unanswering

    # the session's routing, wrappers and all (states.cassandra.session._profile)
    policy = AvoidUnanswering(TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=local_dc)), Unanswering(30.0))
    profile = SimpleNamespace(load_balancing_policy=policy)
    cluster = SimpleNamespace(metadata=SimpleNamespace(keyspaces={
                                  name: SimpleNamespace(replication_strategy=s) for name, s in keyspaces.items()}),
                              profile_manager=SimpleNamespace(profiles={EXEC_PROFILE_DEFAULT: profile}))
    return SimpleNamespace(cluster=cluster)


RF3 = SimpleStrategy({"replication_factor": "3"})
TWO_DCS = NetworkTopologyStrategy({"dc1": "3", "dc2": "3"})


@pytest.mark.parametrize(("settings", "strategy", "setting", "needle"), [
    (CassandraSettings(keyspace="ks", consistency="ONE"), RF3, "consistency", "ONE waits for 1 of the 3 replicas"),
    (CassandraSettings(keyspace="ks", consistency="LOCAL_QUORUM", serial_consistency="SERIAL", local_dc="dc1"),
     TWO_DCS, "consistency", "replicated in 2 data centres"),
    (CassandraSettings(keyspace="ks", consistency="QUORUM", serial_consistency="LOCAL_SERIAL", local_dc="dc1"),
     TWO_DCS, "serial_consistency", "LOCAL_SERIAL runs Paxos"),
])
def test_a_weak_pair_on_the_live_keyspace_stops_run_with_one_line(settings: CassandraSettings, strategy: Any,
                                                                  setting: str, needle: str) -> None:
    """The config's replication (RF 1 by default) passed validate; the keyspace on the cluster is what counts."""
    with pytest.raises(StartupError) as e:
        check_consistency(settings, _client({"ks": strategy}))
    line = str(e.value)
    assert e.value.exit_code == BAD_INPUT
    assert "\n" not in line
    assert line.startswith(f"cassandra.{setting}: "), line
    assert needle in line, line
    assert "keyspace ks on the cluster" in line, line
    assert line.endswith("or set cassandra.accept_weak_consistency: true to run without this guarantee"), line


def test_the_opt_in_runs_with_one_warning_saying_what_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    settings = CassandraSettings(keyspace="ks", consistency="ONE", accept_weak_consistency=True)
    with caplog.at_level(logging.INFO, logger=access.__name__):
        check_consistency(settings, _client({"ks": RF3}))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, caplog.text
    text = warnings[0].getMessage()
    assert "exactly-once is not guaranteed" in text
    assert "cassandra.consistency: ONE waits for 1 of the 3 replicas" in text


def test_a_pair_that_holds_runs_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=access.__name__):
        check_consistency(CassandraSettings(keyspace="ks", consistency="ONE"),
                          _client({"ks": SimpleStrategy({"replication_factor": "1"})}))
        check_consistency(CassandraSettings(keyspace="ks", consistency="QUORUM", serial_consistency="SERIAL"),
                          _client({"ks": TWO_DCS}))
    assert caplog.records == []


def test_a_keyspace_not_created_yet_is_judged_on_the_replication_that_will_create_it() -> None:
    settings = CassandraSettings(keyspace="ks", consistency="ONE",
                                 replication=(("class", "SimpleStrategy"), ("replication_factor", "3")))
    with pytest.raises(StartupError, match=r"from cassandra\.replication"):
        check_consistency(settings, _client({}))


def test_local_levels_are_judged_in_the_data_centre_the_driver_routes_to() -> None:
    """With ``local_dc`` unset the driver's data centre (the contact point's) is the local one."""
    client = _client({"ks": NetworkTopologyStrategy({"dc1": "3"})}, local_dc="dc2")
    assert driver_local_dc(client) == "dc2"
    with pytest.raises(StartupError, match="'dc2', which holds none of the keyspace"):
        check_consistency(CassandraSettings(keyspace="ks"), client)
    check_consistency(CassandraSettings(keyspace="ks"), _client({"ks": NetworkTopologyStrategy({"dc1": "3"})}, "dc1"))


# -- through check_access, on a server ---------------------------------------------------------------------

def _config(base: CassandraSettings, keyspace: str, **cassandra: Any) -> Any:
    section = {"contact_points": list(base.contact_points), "port": base.port, "keyspace": keyspace,
               "local_dc": base.local_dc, "protocol_version": base.protocol_version, **cassandra}
    return parse(doc(cassandra=section, pipelines__0__state={"backend": "cassandra", "table": "wc"}), {})


def _keyspace(settings: CassandraSettings, replication: str) -> str:
    keyspace = f"consistency_{uuid.uuid4().hex[:10]}"
    shared_client(settings).session.execute(f"CREATE KEYSPACE {keyspace} WITH replication = {replication}",
                                            timeout=60)
    return keyspace


def _drop(settings: CassandraSettings, keyspace: str) -> None:
    shared_client(settings).session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=60)


def _tables(settings: CassandraSettings, keyspace: str) -> set[str]:
    cluster = shared_client(settings).cluster
    cluster.refresh_schema_metadata()
    return set(cluster.metadata.keyspaces[keyspace].tables)


@pytest.fixture
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "_check_kafka", lambda config: None)  # Kafka is not what these tests are about


@pytest.mark.usefixtures("no_kafka")
def test_run_refuses_one_on_a_dba_keyspace_of_rf_3_before_claiming_tables(request: pytest.FixtureRequest) -> None:
    """A keyspace created by hand with RF 3 and ``create_keyspace: false``: validate cannot know; run stops, exit 2,
    before any table is created. The CQL test server's keyspace of RF 1 with ONE runs (its tables are claimed)."""
    base = cassandra_peer(request, "cqlserver").base
    weak = _keyspace(base, "{'class': 'SimpleStrategy', 'replication_factor': 3}")
    request.addfinalizer(lambda: _drop(base, weak))
    config = _config(base, weak, consistency="ONE", create_keyspace=False)
    with pytest.raises(StartupError) as e:
        check_access(config, Metrics(CollectorRegistry()))
    assert e.value.exit_code == BAD_INPUT
    assert str(e.value).startswith("cassandra.consistency: ONE waits for 1 of the 3 replicas "
                                   f"(SimpleStrategy, replication factor 3, keyspace {weak} on the cluster)")
    assert _tables(base, weak) == set()  # nothing claimed: no table written

    single = f"consistency_{uuid.uuid4().hex[:10]}"  # created by the service, RF 1: ONE is a majority of one
    request.addfinalizer(lambda: _drop(base, single))
    check_access(_config(base, single, consistency="ONE"), Metrics(CollectorRegistry()))
    assert "trident_table_owners" in _tables(base, single)  # the claim ran


def test_the_rule_on_a_real_replicated_keyspace(request: pytest.FixtureRequest) -> None:
    """A real cluster's metadata: a keyspace of RF 3 per NetworkTopologyStrategy in the cluster's data centre
    refuses ONE and LOCAL_ONE and accepts LOCAL_QUORUM, QUORUM and TWO (skipped without a real Cassandra)."""
    base = cassandra_peer(request, "real").base
    client = shared_client(base)
    dc = base.local_dc or driver_local_dc(client)
    assert dc is not None
    keyspace = _keyspace(base, f"{{'class': 'NetworkTopologyStrategy', '{dc}': 3}}")
    request.addfinalizer(lambda: _drop(base, keyspace))
    client.cluster.refresh_keyspace_metadata(keyspace)
    for level in ("ONE", "LOCAL_ONE"):
        with pytest.raises(StartupError, match=f"{level} waits for 1 of the 3 replicas .{dc}: 3, keyspace "):
            check_consistency(replace(base, keyspace=keyspace, consistency=level), client)
    for level in ("LOCAL_QUORUM", "QUORUM", "TWO"):
        check_consistency(replace(base, keyspace=keyspace, consistency=level), client)
