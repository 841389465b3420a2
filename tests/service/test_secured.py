"""The service against secured real servers: Kafka over SASL_SSL with ACLs, Cassandra with passwords, grants
and required client TLS, both trusting a throwaway CA (:mod:`tests.service.secured`, started once per module).

The product's principals have only what docs/operations.md lists: Kafka ``User:trident`` may Read and
Describe the source topic and its consumer group, Write, Describe and Read the dead-letter topic, and Write
and Describe its dead-letter transactional id; Cassandra role ``trident`` has CREATE, SELECT and MODIFY on
its keyspace. With them a word count matches the producer's ground truth exactly across a SIGKILL, and each
poison sentence is in the dead-letter topic once. Each refusal met at start-up (a wrong password or CA on
either server, a source topic without ACLs, a missing grant) stops ``run`` with exit 2 in under 30 s,
naming the server, the principal and the setting, and writes nothing; a missing Write ACL on the
dead-letter topic (met at the first poison record) stops it with exit 2 as an authorization refusal.
"""

from __future__ import annotations

import os
import shutil
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.peers import REAL_KAFKA, missing_peer
from tests.realstack import find
from tests.service.helpers import WORDS, ServiceProcess, free_port, settled, word_count_config
from tests.service.secured import CASSANDRA_SUPERUSER, KAFKA_USERS, KEYTOOL, SecuredStack

pytestmark = pytest.mark.slow  # the service runs start Spark (the repository's convention for service runs)

KEYSPACE = "secured"
TOPIC = "sentences"
PIPELINE = "wc"
ROLES = {"trident": "trident-secret", "onlyreads": "onlyreads-secret"}
REFUSAL_BOUND_S = 30.0
SENTENCES = 1200  # two txids at least (caps below): a SIGKILL after the first lands between them
DEAD_LETTERS = "sentences-dead-letters"
POISON = "poison"  # a sentence of this one word has a null group-by key: a bad record, dead-lettered
POISON_AT = (7, 650, 1111)  # sentence numbers: one in the first txid, two later


@dataclass
class Secured:
    stack: SecuredStack
    truth: Counter[str]
    sentences: int
    poison_offsets: set[tuple[int, int]]  # (partition, offset) of every poison sentence


def _allow(admin: AdminClient, user: str, grants: list[tuple[ResourceType, str, tuple[AclOperation, ...]]]) -> None:
    bindings = [AclBinding(kind, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)
                for kind, name, ops in grants for op in ops]
    for f in admin.create_acls(bindings, request_timeout=30).values():
        f.result(60)


def _grant_kafka(stack: SecuredStack) -> None:
    """The ACLs docs/operations.md lists, for ``User:trident`` (pipeline ``wc``); ``User:nodlwrite`` (pipeline
    ``nodl``) has the same but Write on the dead-letter topic; ``User:noread`` (pipeline ``noread``) the same but
    Read on the source topic (it may describe it); ``User:stranger`` has none."""
    admin = AdminClient(stack.kafka_client("admin"))
    read = (AclOperation.READ, AclOperation.DESCRIBE)
    for user, pipeline, dead_letter_ops in (("trident", PIPELINE, (AclOperation.WRITE, *read)),
                                            ("nodlwrite", "nodl", read)):
        _allow(admin, user, [(ResourceType.TOPIC, TOPIC, read), (ResourceType.GROUP, f"trident-{pipeline}", read),
                             (ResourceType.TOPIC, DEAD_LETTERS, dead_letter_ops),
                             (ResourceType.TRANSACTIONAL_ID, f"trident-dead-letters-{pipeline}",
                              (AclOperation.WRITE, AclOperation.DESCRIBE))])
    _allow(admin, "noread", [(ResourceType.TOPIC, TOPIC, (AclOperation.DESCRIBE,)),
                             (ResourceType.GROUP, "trident-noread", read),
                             (ResourceType.TOPIC, DEAD_LETTERS, (AclOperation.WRITE, *read)),
                             (ResourceType.TRANSACTIONAL_ID, "trident-dead-letters-noread",
                              (AclOperation.WRITE, AclOperation.DESCRIBE))])


def _produce(stack: SecuredStack, n: int) -> tuple[Counter[str], set[tuple[int, int]]]:
    """``n`` sentences to the source topic as ``admin`` (the poison ones at :data:`POISON_AT`): the words of
    every acknowledged good one (the ground truth), and where the poison ones landed."""
    import random

    admin = AdminClient(stack.kafka_client("admin"))
    for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(DEAD_LETTERS, 1, 1)], request_timeout=30).values():
        f.result(60)
    rng, truth, poison, errors = random.Random(31), Counter[str](), set[tuple[int, int]](), []
    producer = Producer({**stack.kafka_client("admin"), "enable.idempotence": True, "linger.ms": 5})
    for i in range(n):
        words = [] if i in POISON_AT else [rng.choice(WORDS) for _ in range(rng.randint(1, 6))]

        def acked(err: Any, msg: Any, words: list[str] = words) -> None:
            if err is not None:
                errors.append(err)
            elif words:
                truth.update(words)
            else:
                poison.add((msg.partition(), msg.offset()))

        producer.produce(TOPIC, (" ".join(words) or POISON).encode(), partition=i % 2, on_delivery=acked)
        producer.poll(0)
    assert producer.flush(60) == 0, errors[:3]
    assert not errors, errors[:3]
    return truth, poison


def dead_letter_sources(stack: SecuredStack) -> list[tuple[int, int]]:
    """The source (partition, offset) of every committed dead letter, read as ``admin``."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**stack.kafka_client("admin"), "group.id": "check", "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(DEAD_LETTERS, 0, 0)])
        out = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1)
            if m is None:
                continue
            if m.error() is not None:
                break  # end of the partition
            headers = dict(m.headers() or [])
            out.append((int(cast(bytes, headers["trident.source.partition"])),
                        int(cast(bytes, headers["trident.source.offset"]))))
        return out
    finally:
        c.close()


def cql_session(stack: SecuredStack, user: str, password: str, ca: Path | None = None) -> Any:
    from cassandra.auth import PlainTextAuthProvider
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import DCAwareRoundRobinPolicy

    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca or stack.ca.ca_pem))
    profile = ExecutionProfile(load_balancing_policy=DCAwareRoundRobinPolicy("datacenter1"))
    cluster = Cluster(["127.0.0.1"], port=stack.cassandra_port, auth_provider=PlainTextAuthProvider(user, password),
                      ssl_context=ctx, execution_profiles={EXEC_PROFILE_DEFAULT: profile}, protocol_version=5,
                      connect_timeout=10)
    return cluster.connect()


def _grant_cassandra(stack: SecuredStack) -> None:
    """Keyspace made by the administrator; role ``trident`` gets CREATE, SELECT and MODIFY on it, role
    ``onlyreads`` SELECT only."""
    deadline = time.monotonic() + 60
    while True:  # the default superuser is created just after the node starts listening
        try:
            session = cql_session(stack, *CASSANDRA_SUPERUSER)
            break
        except Exception:
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
    if shutil.which("openssl") is None or not Path(KEYTOOL).exists():
        missing_peer(REAL_KAFKA, "openssl and a JDK's keytool are needed to make the secured servers' test CA")
    stack = SecuredStack(tmp_path_factory.mktemp("secured"))
    try:
        stack.start()
        truth, poison = _produce(stack, SENTENCES)
        _grant_kafka(stack)
        _grant_cassandra(stack)
        yield Secured(stack, truth, SENTENCES, poison)
    finally:
        stack.stop()


def service_for(secured: Secured, tmp_path: Path, *, kafka_user: str = "trident", kafka_password: str | None = None,
                kafka_ca: Path | None = None, cassandra_user: str = "trident", cassandra_password: str | None = None,
                cassandra_ca: Path | None = None, pipeline: str = PIPELINE, table: str = "word_counts") -> ServiceProcess:
    """The word count on the secured servers, poison sentences dead-lettered; secrets only through the
    environment, as deployed."""
    s = secured.stack
    port = free_port()
    path = word_count_config(
        tmp_path / "service.yaml", bootstrap=s.sasl_bootstrap, topic=TOPIC, port=port, pipeline_id=pipeline,
        state={"backend": "cassandra", "table": table, "cache_size": 100}, caps=(300, 600),
        cassandra={"contact_points": ["127.0.0.1"], "port": s.cassandra_port, "keyspace": KEYSPACE,
                   "create_keyspace": False, "username": cassandra_user, "local_dc": "datacenter1",
                   "consistency": "ONE", "request_timeout_s": 5,
                   "tls": {"enabled": True, "ca_file": str(cassandra_ca or s.ca.ca_pem)}})
    doc = yaml.safe_load(path.read_text())
    doc["pipelines"][0]["transforms"] = [
        {"map": ["explode(split(CAST(value AS STRING), ' ')) AS word"]},
        {"filter": "word <> ''"},
        {"map": [f"IF(word = '{POISON}', NULL, word) AS word"]}]  # the poison sentence's key is null: a bad record
    doc["pipelines"][0]["errors"] = {"dead_letter": {"topic": DEAD_LETTERS}}
    doc["kafka"]["properties"] = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                  "sasl.username": kafka_user, "ssl.ca.location": str(kafka_ca or s.ca.ca_pem)}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env = {"TRIDENT_KAFKA_SASL_PASSWORD": kafka_password or KAFKA_USERS.get(kafka_user, "wrong"),
           "TRIDENT_CASSANDRA_PASSWORD": cassandra_password or ROLES.get(cassandra_user, "wrong")}
    return ServiceProcess(path, tmp_path / "service.log", port, env=env)


def stored_counts(secured: Secured, table: str = "word_counts") -> dict[str, int]:
    from cassandra import InvalidRequest

    session = cql_session(secured.stack, *CASSANDRA_SUPERUSER)
    try:
        rows = session.execute(f"SELECT word, count FROM {KEYSPACE}.{table}")
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
        # read once what the killed service had in flight has landed (a request Cassandra had received is
        # executed after the kill; PySpark's Python workers outlive the process group for a moment)
        partial = settled(lambda: stored_counts(secured))
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
    letters = dead_letter_sources(secured.stack)
    assert sorted(letters) == sorted(secured.poison_offsets)  # each poison sentence once, nothing else
    log = service.log.read_text(errors="replace")
    for secret in (*ROLES.values(), *KAFKA_USERS.values()):
        assert secret not in log


def refused_run(secured: Secured, tmp_path: Path, *, bound_s: float = REFUSAL_BOUND_S, spark_ran: bool = False,
                **kwargs: Any) -> tuple[str, float]:
    """Run a service that must be refused: asserts exit 2 within ``bound_s``; its log, and seconds to exit.

    ``spark_ran``: the refusal came from a Spark task, whose failure Spark's own log prints with the task's
    Python traceback quoted inside its line; the service's own lines still print none."""
    before = stored_counts(secured)
    service = service_for(secured, tmp_path, **kwargs)
    t0 = time.monotonic()
    code = service.run_to_exit(120)
    took = time.monotonic() - t0
    log = service.run_log()
    assert code == 2, log[-3000:]
    assert took < bound_s, f"took {took:.1f} s:\n{log[-3000:]}"
    if spark_ran:
        assert not any(line.startswith("Traceback") for line in log.splitlines()), log[-3000:]
    else:
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
    assert "Invalid username or password" in line
    assert "check sasl.username, sasl.password" in line
    assert "not-the-password" not in log


@pytest.mark.timeout(300)
def test_an_untrusted_kafka_certificate_stops_run_with_exit_2_naming_the_ca_setting(secured: Secured,
                                                                                    tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, kafka_ca=secured.stack.other_ca.ca_pem)
    line = _stopped_line(log)
    assert f"TLS refused by Kafka at {secured.stack.sasl_bootstrap} for principal User:trident" in line
    assert "certificate verify failed" in line
    assert "check ssl.ca.location" in line


@pytest.mark.timeout(300)
def test_a_missing_kafka_acl_stops_run_with_exit_2_as_authorization_refused(secured: Secured,
                                                                           tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, kafka_user="stranger")  # a valid user without any ACL
    line = _stopped_line(log)
    assert "authorization refused by Kafka" in line
    assert "User:stranger" in line
    assert f"topic {TOPIC}" in line
    assert "authentication refused" not in log


@pytest.mark.timeout(300)
def test_a_missing_read_acl_refused_in_a_spark_task_stops_run_with_exit_2(secured: Secured, tmp_path: Path) -> None:
    """Describe allowed, Read not: planning works and only the executors' fetch is refused. The refusal reaches the
    driver as a task's text; reading the range again on the driver gives it its type: exit 2, one line."""
    # Spark starts and runs the txid's read job (its tasks retried) before the refusal can show: a longer bound
    log, _ = refused_run(secured, tmp_path, bound_s=3 * REFUSAL_BOUND_S, spark_ran=True, kafka_user="noread",
                         pipeline="noread", table="word_counts_noread")
    line = _stopped_line(log)
    assert "authorization refused by Kafka" in line, line
    assert "User:noread" in line, line
    assert "reading its ranges here" in log  # named by the read on the driver, not by the task's text


@pytest.mark.timeout(300)
def test_a_wrong_cassandra_password_stops_run_with_exit_2_in_one_line(secured: Secured, tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_password="not-the-password")
    line = _stopped_line(log)
    assert "start-up failed: authentication refused by Cassandra at 127.0.0.1:" in line
    assert "for role trident" in line
    assert "TRIDENT_CASSANDRA_PASSWORD" in line
    assert "not-the-password" not in log


@pytest.mark.timeout(300)
def test_an_untrusted_cassandra_certificate_stops_run_with_exit_2(secured: Secured, tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_ca=secured.stack.other_ca.ca_pem)
    line = _stopped_line(log)
    assert "start-up failed: TLS refused by Cassandra at 127.0.0.1:" in line
    assert "cassandra.tls.ca_file" in line


@pytest.mark.timeout(300)
def test_a_missing_cassandra_grant_stops_run_with_exit_2_as_authorization_refused(secured: Secured,
                                                                                 tmp_path: Path) -> None:
    log, _ = refused_run(secured, tmp_path, cassandra_user="onlyreads")
    line = _stopped_line(log)
    assert "authorization refused by Cassandra for role onlyreads" in line
    assert "CREATE" in line


@pytest.mark.timeout(600)
def test_a_missing_write_acl_on_the_dead_letter_topic_stops_run_with_exit_2_as_authorization_refused(
        secured: Secured, tmp_path: Path) -> None:
    """Met at the first poison record, after Spark started (so no 30 s bound): exit 2, named as an
    authorization refusal of the dead-letter topic, and that txid's counts never stored."""
    service = service_for(secured, tmp_path, kafka_user="nodlwrite", pipeline="nodl", table="word_counts_nodl")
    letters = dead_letter_sources(secured.stack)
    code = service.run_to_exit(480)
    log = service.run_log()
    assert code == 2, log[-3000:]
    line = _stopped_line(log)
    assert "authorization refused by Kafka" in line
    assert "User:nodlwrite" in line
    assert f"dead-letter topic {DEAD_LETTERS}" in line
    assert "authentication refused" not in log
    assert stored_counts(secured, "word_counts_nodl") == {}  # the first txid holds a poison sentence
    assert dead_letter_sources(secured.stack) == letters


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
        assert "Traceback" not in r.stderr, r.stderr
        assert "refused by" in r.stderr, r.stderr
        assert took < REFUSAL_BOUND_S
