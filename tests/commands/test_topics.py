"""``topics plan|apply``: create, grow and reconfigure declared topics; never delete or shrink; refuse unsafe changes.

The mock Kafka cluster reports no controller, so the AdminClient's CreateTopics, CreatePartitions,
DescribeConfigs and IncrementalAlterConfigs all time out there ("waiting for controller"): on the
mock the commands must degrade with a message; the apply-twice behaviour runs on a real Kafka, and
on an in-memory cluster behind the same small protocol the command uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from app.commands.common import BAD_INPUT, FAILED, OK, PARTIAL, REFUSED, CommandError
from app.commands.topics import apply_topics, plan_topics
from app.commands.topics.plan import TopicState
from app.config import ConfigError, loads
from app.config.topics import TopicSettings
from tests.commands.helpers import cli, write_config
from tests.kafka.fixtures import KafkaPeer, MockKafkaCluster, skip_mock_gap, unique_topic

ADMIN_API = {"mock": False, "real": True}  # the mock answers no controller-bound admin request (see the gap test)
NO_CONTROLLER_WAIT = {"request_timeout_s": 1}  # the mock never answers them: each waits out the whole timeout


class MemoryTopicCluster:
    """A cluster of topics in memory with the protocol ``topics`` uses; it records every change."""

    def __init__(self, topics: Sequence[TopicState] = ()) -> None:
        self.topics = {t.name: t for t in topics}
        self.calls: list[tuple[str, str]] = []

    def describe(self, names: Sequence[str]) -> dict[str, TopicState]:
        return {n: self.topics[n] for n in names if n in self.topics}

    def create(self, topic: TopicSettings) -> None:
        self.calls.append(("create", topic.name))
        self.topics[topic.name] = TopicState(topic.name, topic.partitions, topic.replication_factor or 1,
                                             {"retention.ms": "604800000", **dict(topic.configs)})

    def add_partitions(self, name: str, total: int) -> None:
        self.calls.append(("add_partitions", name))
        t = self.topics[name]
        self.topics[name] = TopicState(name, total, t.replication_factor, t.configs)

    def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self.calls.append(("set_configs", name))
        t = self.topics[name]
        self.topics[name] = TopicState(name, t.partitions, t.replication_factor, {**(t.configs or {}), **configs})


DECLARED = (TopicSettings("events", 6, 3, (("cleanup.policy", "delete"), ("retention.ms", "259200000"))),
            TopicSettings("dead-letters", 1, 3))


def test_apply_twice_second_changes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    cluster = MemoryTopicCluster([TopicState("events", 4, 3, {"retention.ms": "604800000", "cleanup.policy": "delete",
                                                              "segment.ms": "1000"}),
                                  TopicState("undeclared", 1, 1, {})])
    plan = plan_topics(DECLARED, cluster)
    assert [(c.kind, c.topic) for c in plan.changes] == [("add_partitions", "events"), ("set_configs", "events"),
                                                         ("create", "dead-letters")]
    assert plan.changes[1].configs == {"retention.ms": "259200000"}  # only what differs; segment.ms untouched
    assert apply_topics(DECLARED, cluster, report=lambda _: None) == OK
    out = capsys.readouterr().out
    assert "nothing to change" not in out  # what was applied, not the re-plan after it
    assert out.splitlines()[-1] == "applied 3 change(s): 1 to create, 1 to grow, 1 to reconfigure"
    assert cluster.topics["events"].partitions == 6
    assert (cluster.topics["events"].configs or {})["segment.ms"] == "1000"
    assert "undeclared" in cluster.topics  # never deleted
    calls = list(cluster.calls)
    assert apply_topics(DECLARED, cluster, report=lambda _: None) == OK
    assert capsys.readouterr().out.splitlines()[-1] == "nothing to change"
    assert cluster.calls == calls  # the second apply changed nothing
    again = plan_topics(DECLARED, cluster)
    assert again.empty
    assert again.summary() == "nothing to change"
    assert again.up_to_date == ("events", "dead-letters")


@pytest.mark.parametrize(("state", "field", "reason"), [
    (TopicState("events", 8, 3, {}), "partitions", "Kafka cannot remove partitions"),
    (TopicState("events", 6, 1, {}), "replication_factor", "partition reassignment"),
])
def test_unsafe_changes_are_refused_and_nothing_is_applied(state: TopicState, field: str, reason: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    cluster = MemoryTopicCluster([state])
    assert apply_topics(DECLARED, cluster, report=lambda _: None) == REFUSED
    assert cluster.calls == []  # not even the safe creation of dead-letters
    out = capsys.readouterr().out
    assert f"! events: refused: {field}:" in out
    assert reason in out


def test_unreadable_configs_are_reported_not_guessed() -> None:
    cluster = MemoryTopicCluster([TopicState("events", 6, 3, None, "Failed while waiting for controller")])
    plan = plan_topics(DECLARED, cluster)
    assert [u.describe() for u in plan.unknowns] == \
        ["? events: cannot read topic configs from this cluster: Failed while waiting for controller"]
    assert apply_topics(DECLARED, cluster, report=lambda _: None) == PARTIAL
    assert cluster.calls == [("create", "dead-letters")]


def test_topics_apply_creates_and_configures_and_a_second_apply_changes_nothing(kafka_peer: KafkaPeer,
                                                                                tmp_path: Path) -> None:
    """Apply creates and configures the declared topic; the second apply says nothing to change."""
    if not ADMIN_API[kafka_peer.kind]:
        skip_mock_gap("librdkafka's mock answers no controller-bound admin request; checked by "
                      "test_mock_cluster_still_answers_no_admin_requests")
    topic = unique_topic("tp")
    declared = {topic: {"partitions": 2, "replication_factor": int(os.environ.get("KAFKA_REPLICATION_FACTOR", "1")),
                        "configs": {"retention.ms": 172800000, "cleanup.policy": "delete"}}}
    path = write_config(tmp_path / "c.yaml", bootstrap=kafka_peer.bootstrap_servers(), topic=topic, topics=declared,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")})
    first = cli("topics", "apply", "--config", str(path))
    assert first.code == OK, first.err
    assert "applied 1 change(s): 1 to create" in first.err
    second = cli("topics", "apply", "--config", str(path))
    assert second.code == OK, second.out + second.err
    assert "nothing to change" in second.out, second.out + second.err
    assert f"= {topic}: up to date" in second.out
    kafka_peer.delete_topic(topic)


def test_topics_on_a_cluster_without_a_controller_report_what_they_cannot_do(kafka_cluster: MockKafkaCluster,
                                                                              tmp_path: Path) -> None:
    """The mock (no controller): the topic (made through its control API) is compared by partitions and
    replication, the configs are reported unreadable (exit 4), and an apply that must create fails with the
    topic named, no traceback."""
    topic, new = unique_topic("tp"), unique_topic("tp")
    bootstrap = kafka_cluster.bootstrap_servers()
    declared = {topic: {"partitions": 2, "replication_factor": 3,
                        "configs": {"retention.ms": 172800000, "cleanup.policy": "delete"}}}
    kafka_cluster.create_topic(topic, 2, 3)
    path = write_config(tmp_path / "c.yaml", bootstrap=bootstrap, topic=topic, topics=declared,
                        state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")}, kafka_extra=NO_CONTROLLER_WAIT)
    r = cli("topics", "plan", "--config", str(path))
    assert r.code == PARTIAL, r.err
    assert f"? {topic}: cannot read topic configs from this cluster: " in r.out
    assert "Traceback" not in r.err
    grown = write_config(tmp_path / "g.yaml", bootstrap=bootstrap, topic=topic,
                         topics={**declared, new: {"partitions": 1}},
                         state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")}, kafka_extra=NO_CONTROLLER_WAIT)
    r = cli("topics", "apply", "--config", str(grown))
    assert r.code == FAILED
    assert f"create topic {new}: " in r.err
    assert "Traceback" not in r.err


def test_mock_cluster_still_answers_no_admin_requests(kafka_cluster: MockKafkaCluster) -> None:
    """librdkafka's mock has no controller: CreateTopics and DescribeConfigs time out.

    If this fails after a librdkafka upgrade, the mock gained these admin APIs: set ADMIN_API["mock"]
    above so the apply-twice test runs on the mock as well.
    """
    topic = unique_topic("gap")
    kafka_cluster.create_topic(topic, 1)
    admin = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap_servers()})
    [f] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=1).values()
    with pytest.raises(Exception, match="controller"):
        f.result(10)
    [f] = admin.create_topics([NewTopic(unique_topic("gap"), 1, 1)], request_timeout=1).values()
    with pytest.raises(Exception, match="controller"):
        f.result(10)
    assert not ADMIN_API["mock"]


BASE = """
kafka: {bootstrap_servers: "localhost:9092"}
pipelines:
  - id: wc
    spout: {topics: [events]}
    aggregates: [count]
    state: {sqlite_path: /tmp/x.db}
"""


@pytest.mark.parametrize(("topics", "path", "message"), [
    ("{events: {partitions: 0}}", "topics.events.partitions", "must be >= 1"),
    ("{events: {replication_factor: 3}}", "topics.events.partitions", "required"),
    ("{events: {partitions: 3, replicas: 3}}", "topics.events.replicas", "unknown key"),
    ("{'bad topic': {partitions: 1}}", "topics.bad topic", "invalid topic name"),
    ("{events: {partitions: 1, configs: {retention.ms: soon}}}", "topics.events.configs.retention.ms",
     "expected an integer"),
    ("{events: {partitions: 1, configs: {cleanup.policy: forever}}}", "topics.events.configs.cleanup.policy",
     "not one of delete"),
    ("{events: {partitions: 1, replication_factor: 2, configs: {min.insync.replicas: 3}}}",
     "topics.events.configs.min.insync.replicas", "more than the replication_factor 2"),
    ("{events: {partitions: 1, configs: {Retention: 1}}}", "topics.events.configs.Retention", "invalid topic config"),
    ("[events]", "topics", "expected a mapping"),
])
def test_topics_section_errors_name_the_field(topics: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        loads(BASE + f"topics: {topics}\n", {})
    assert e.value.path == path
    assert message in e.value.message


def test_validate_warns_about_short_source_retention(tmp_path: Path) -> None:
    cfg = loads(BASE + "topics: {events: {partitions: 3, configs: {retention.ms: 3600000}}}\n", {})
    assert cfg.declared_topics() == (TopicSettings("events", 3, None, (("retention.ms", "3600000"),)),)
    f = tmp_path / "c.yaml"
    f.write_text(BASE + "topics: {events: {partitions: 3, configs: {retention.ms: 3600000}}, "
                        "other: {partitions: 1, configs: {retention.ms: 1000}}}\n")
    r = cli("validate", "--config", str(f))
    assert r.code == 0, r.err
    assert "warning: topics.events.configs.retention.ms: 3600000 ms (1.0 h) is shorter than" in r.err
    assert "other" not in r.err  # not a source topic of any pipeline
    f.write_text(BASE + "topics: {events: {partitions: 3, configs: {retention.ms: 604800000}}}\n")
    r = cli("validate", "--config", str(f))
    assert r.code == 0
    assert "warning" not in r.err


def test_an_absurd_partition_count_is_bad_input_in_one_line_before_any_change(tmp_path: Path) -> None:
    """100 million partitions: exit 2 naming the topic, nothing asked of the cluster (it was a ValueError from
    the client, exit 1, after the create had been announced)."""
    cluster = MemoryTopicCluster()
    with pytest.raises(CommandError) as raised:
        apply_topics([TopicSettings("huge", 100_000_000)], cluster)
    assert raised.value.code == BAD_INPUT
    assert "huge (100,000,000)" in str(raised.value)
    assert cluster.calls == []
    config = write_config(tmp_path / "c.yaml", bootstrap="127.0.0.1:1", topic="huge",
                          state={"backend": "sqlite", "sqlite_path": str(tmp_path / "s.db")},
                          topics={"huge": {"partitions": 100_000_000}}, kafka_extra={"request_timeout_s": 1})
    result = cli("topics", "apply", "--config", str(config))
    assert result.code == BAD_INPUT, result
    assert result.err.strip().count("\n") == 0, result.err
    assert "huge (100,000,000)" in result.err, result.err
