"""The service against secured real servers: Kafka over SASL_SSL with ACLs, Cassandra with passwords, grants
and required client TLS, both trusting a throwaway CA (:mod:`tests.service.secured`, started once per module).

The product's principals have only what docs/operations.md lists: Kafka ``User:trident`` may Read and
Describe the source topic and its consumer group, Cassandra role ``trident`` has CREATE, SELECT and MODIFY on
its keyspace. With them a word count matches the producer's ground truth exactly, across a SIGKILL. Each
refusal (a wrong password or CA on either server, a missing ACL or grant) stops ``run`` with exit 2 in under
30 s, naming the server, the principal and the setting, and writes nothing.
"""

from __future__ import annotations

import os
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType

from tests.peers import REAL_KAFKA, missing_peer
from tests.realstack import find
from tests.service.helpers import WORDS, ServiceProcess, free_port, word_count_config
from tests.service.secured import CASSANDRA_SUPERUSER, KAFKA_USERS, SecuredStack

pytestmark = pytest.mark.slow  # the service runs start Spark (the repository's convention for service runs)

KEYSPACE = "secured"
TOPIC = "sentences"
PIPELINE = "wc"
ROLES = {"trident": "trident-secret", "onlyreads": "onlyreads-secret"}
REFUSAL_BOUND_S = 30.0
SENTENCES = 1200  # two txids at least (caps below): a SIGKILL after the first lands between them


@dataclass
class Secured:
    stack: SecuredStack
    truth: Counter[str]
    sentences: int


def _grant_kafka(stack: SecuredStack) -> None:
    """The ACLs of ``User:trident``: Read and Describe on the source topic and on the pipeline's group."""
    admin = AdminClient(stack.kafka_client("admin"))
    allow = AclPermissionType.ALLOW
    bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, "User:trident", "*", op, allow)
                for kind, name in ((ResourceType.TOPIC, TOPIC), (ResourceType.GROUP, f"trident-{PIPELINE}"))
                for op in (AclOperation.READ, AclOperation.DESCRIBE)]
    for f in admin.create_acls(bindings, request_timeout=30).values():
        f.result(60)


def _produce(stack: SecuredStack, n: int) -> Counter[str]:
    """``n`` sentences to the source topic as ``admin``; the words of every acknowledged one (the ground truth)."""
    import random

    admin = AdminClient(stack.kafka_client("admin"))
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1)], request_timeout=30).values():
        f.result(60)
    rng, truth, errors = random.Random(31), Counter[str](), []
    producer = Producer({**stack.kafka_client("admin"), "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]

        def acked(err: Any, msg: Any, words: list[str] = words) -> None:
            if err is None:
                truth.update(words)
            else:
                errors.append(err)

        producer.produce(TOPIC, " ".join(words).encode(), partition=i % 2, on_delivery=acked)
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return truth


def cql_session(stack: SecuredStack, user: str, password: str, ca: Path | None = None) -> Any:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import Cluster
    from cassandra.policies import DCAwareRoundRobinPolicy

    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca or stack.ca.ca_pem))
    cluster = Cluster(["127.0.0.1"], port=stack.cassandra_port, auth_provider=PlainTextAuthProvider(user, password),
                      ssl_context=ctx, load_balancing_policy=DCAwareRoundRobinPolicy("datacenter1"),
                      protocol_version=5, connect_timeout=10)
    return cluster.connect()


def _grant_cassandra(stack: SecuredStack) -> None:
    """Keyspace made by the administrator; role ``trident`` gets CREATE, SELECT and MODIFY on it, role
    ``onlyreads`` SELECT only."""
    deadline = time.monotonic() + 60
    while True:  # the default superuser is created just after the node starts listening
        try:
            session = cql_session(stack, *CASSANDRA_SUPERUSER)
            break
        except Exception:  # noqa: BLE001 - retried until the deadline
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    try:
        session.execute(f"CREATE KEYSPACE IF NOT EXISTS {KEYSPACE} WITH replication = "
                        "{'class': 'SimpleStrategy', 'replication_factor': 1}")
        for role, password in ROLES.items():
            session.execute(f"CREATE ROLE IF NOT EXISTS {role} WITH PASSWORD = '{password}' AND LOGIN = true")
        for permission in ("CREATE", "SELECT", "MODIFY"):
            session.execute(f"GRANT {permission} ON KEYSPACE {KEYSPACE} TO trident")
        session.execute(f"GRANT SELECT ON KEYSPACE {KEYSPACE} TO onlyreads")
    finally:
        session.cluster.shutdown()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    if find() is None:
        missing_peer(REAL_KAFKA, "no realstack folder to start a secured Kafka and Cassandra from (set REALSTACK_DIR)")
    stack = SecuredStack(tmp_path_factory.mktemp("secured"))
    try:
        stack.start()
        truth = _produce(stack, SENTENCES)
        _grant_kafka(stack)
        _grant_cassandra(stack)
        yield Secured(stack, truth, SENTENCES)
    finally:
        stack.stop()


def service_for(secured: Secured, tmp_path: Path, *, kafka_user: str = "trident", kafka_password: str | None = None,
                kafka_ca: Path | None = None, cassandra_user: str = "trident", cassandra_password: str | None = None,
                cassandra_ca: Path | None = None) -> ServiceProcess:
    """The word count on the secured servers; secrets only through the environment, as deployed."""
    s = secured.stack
    port = free_port()
    path = word_count_config(
        tmp_path / "service.yaml", bootstrap=s.sasl_bootstrap, topic=TOPIC, port=port, pipeline_id=PIPELINE,
        state={"backend": "cassandra", "table": "word_counts", "cache_size": 100}, caps=(300, 600),
        cassandra={"contact_points": ["127.0.0.1"], "port": s.cassandra_port, "keyspace": KEYSPACE,
                   "create_keyspace": False, "username": cassandra_user, "local_dc": "datacenter1",
                   "consistency": "ONE", "request_timeout_s": 5,
                   "tls": {"enabled": True, "ca_file": str(cassandra_ca or s.ca.ca_pem)}})
    doc = yaml.safe_load(path.read_text())
    doc["kafka"]["properties"] = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                  "sasl.username": kafka_user, "ssl.ca.location": str(kafka_ca or s.ca.ca_pem)}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {"TRIDENT_KAFKA_SASL_PASSWORD": kafka_password or KAFKA_USERS.get(kafka_user, "wrong"),
           "TRIDENT_CASSANDRA_PASSWORD": cassandra_password or ROLES.get(cassandra_user, "wrong")}
    return ServiceProcess(path, tmp_path / "service.log", port, env=env)


def stored_counts(secured: Secured) -> dict[str, int]:
    from cassandra import InvalidRequest

    session = cql_session(secured.stack, *CASSANDRA_SUPERUSER)
    try:
        rows = session.execute(f"SELECT word, count FROM {KEYSPACE}.word_counts")
        return {r.word: int(r.count) for r in rows}
    except InvalidRequest:  # no table yet
        return {}
    finally:
        session.cluster.shutdown()


@pytest.mark.timeout(600)
def test_word_count_on_secured_servers_matches_the_ground_truth_across_a_sigkill(secured: Secured,
                                                                                  tmp_path: Path) -> None:
    service = service_for(secured, tmp_path)
    try:
        service.start()
        deadline = time.monotonic() + 240
        while service.commits_this_run() < 1:  # some txids committed: kill it between the others
            service.check_alive()
            assert time.monotonic() < deadline, service.tail()
            time.sleep(0.2)
        service.kill()
        partial = stored_counts(secured)
        service.start()
        deadline = time.monotonic() + 300
        while stored_counts(secured) != secured.truth:
            service.check_alive()
            assert time.monotonic() < deadline, f"did not drain: {stored_counts(secured)} != {dict(secured.truth)}"
            time.sleep(1)
        service.wait_ready()
        assert service.terminate() == 0
    finally:
        service.cleanup()
    assert stored_counts(secured) == dict(secured.truth)
    assert sum(partial.values()) < sum(secured.truth.values())  # the kill landed before the end
    log = service.log.read_text(errors="replace")
    for secret in ("trident-secret", *KAFKA_USERS.values()):
        assert secret not in log


def refused_run(secured: Secured, tmp_path: Path, **kwargs: Any) -> tuple[str, float]:
    """Run a service that must be refused: asserts exit 2 within the bound; its log, and seconds to exit."""
    before = stored_counts(secured)
    service = service_for(secured, tmp_path, **kwargs)
    t0 = time.monotonic()
    service.start()
    try:
        assert service.proc is not None
        code = service.proc.wait(120)
        took = time.monotonic() - t0
    finally:
        service.cleanup()
    log = service.run_log()
    assert code == 2, log[-3000:]
    assert took < REFUSAL_BOUND_S, f"took {took:.1f} s:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]
    assert stored_counts(secured) == before  # nothing written
    return log, took


def _stopped_line(log: str) -> str:
    lines = [ln for ln in log.splitlines() if "refused by" in ln and ("stopped (exit code 2)" in ln
                                                                      or "start-up failed" in ln)]
    assert lines, log[-3000:]
    return lines[0]


@pytest.mark.timeout(300)
def test_a_wrong_kafka_password_stops_run_with_exit_2_naming_principal_and_setting(secured: Secured,
                                                                                   tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, kafka_password="not-the-password")
    line = _stopped_line(log)
    assert f"authentication refused by Kafka at {secured.stack.sasl_bootstrap} for principal User:trident" in line
    assert "Invalid username or password" in line and "check sasl.username, sasl.password" in line
    assert "not-the-password" not in log


@pytest.mark.timeout(300)
def test_an_untrusted_kafka_certificate_stops_run_with_exit_2_naming_the_ca_setting(secured: Secured,
                                                                                    tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, kafka_ca=secured.stack.other_ca.ca_pem)
    line = _stopped_line(log)
    assert f"TLS refused by Kafka at {secured.stack.sasl_bootstrap} for principal User:trident" in line
    assert "certificate verify failed" in line and "check ssl.ca.location" in line


@pytest.mark.timeout(300)
def test_a_missing_kafka_acl_stops_run_with_exit_2_as_authorization_refused(secured: Secured,
                                                                           tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, kafka_user="stranger")  # a valid user without any ACL
    line = _stopped_line(log)
    assert "authorization refused by Kafka" in line and "User:stranger" in line and f"topic {TOPIC}" in line
    assert "authentication refused" not in log


@pytest.mark.timeout(300)
def test_a_wrong_cassandra_password_stops_run_with_exit_2_in_one_line(secured: Secured, tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_password="not-the-password")
    line = _stopped_line(log)
    assert "start-up failed: authentication refused by Cassandra at 127.0.0.1:" in line
    assert "for role trident" in line and "TRIDENT_CASSANDRA_PASSWORD" in line
    assert "not-the-password" not in log


@pytest.mark.timeout(300)
def test_an_untrusted_cassandra_certificate_stops_run_with_exit_2(secured: Secured, tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_ca=secured.stack.other_ca.ca_pem)
    line = _stopped_line(log)
    assert "start-up failed: TLS refused by Cassandra at 127.0.0.1:" in line and "cassandra.tls.ca_file" in line


@pytest.mark.timeout(300)
def test_a_missing_cassandra_grant_stops_run_with_exit_2_as_authorization_refused(secured: Secured,
                                                                                 tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_user="onlyreads")
    line = _stopped_line(log)
    assert "authorization refused by Cassandra for role onlyreads" in line and "CREATE" in line


def test_commands_say_a_refusal_in_one_line(secured: Secured, tmp_path: Path) -> None:
    """``status`` with a wrong Cassandra password and ``topics plan`` with a wrong Kafka password: exit 2, one
    line, no traceback."""
    import subprocess
    import sys

    from tests.service.helpers import ROOT

    service = service_for(secured, tmp_path, kafka_password="not-the-password", cassandra_password="nope")
    doc = yaml.safe_load(service.config.read_text())
    doc["topics"] = {TOPIC: {"partitions": 2, "replication_factor": 1}}
    service.config.write_text(yaml.safe_dump(doc, sort_keys=False))
    for argv in (["status", "--config", str(service.config)], ["topics", "plan", "--config", str(service.config)]):
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "app", *argv], cwd=ROOT, env={**os.environ, **service.env},
                           capture_output=True, text=True, timeout=120)
        took = time.monotonic() - t0
        assert r.returncode == 2, r.stdout + r.stderr
        assert "Traceback" not in r.stderr and "refused by" in r.stderr, r.stderr
        assert took < REFUSAL_BOUND_S
