"""``topics plan|apply``: the ``topics:`` section of a config against the Kafka cluster.

``plan`` prints what ``apply`` would do (create, add partitions, set configs) and what it refuses
(fewer partitions, another replication factor). ``apply`` refuses everything if anything is
refused, otherwise applies the plan step by step and plans again to check; a second apply says
"nothing to change". Topics are never deleted, partitions never removed, undeclared configs
never touched. A cluster that will not show configs makes both commands exit 4 after doing the rest.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from app.commands.common import BAD_INPUT, FAILED, OK, PARTIAL, REFUSED, CommandError, load_config, parser, progress
from app.commands.output import print_json

if TYPE_CHECKING:  # the Kafka admin client and the config models: imported when the command runs, not for --help
    from app.commands.topics.cluster import TopicCluster
    from app.commands.topics.plan import Change, Plan
    from app.config.topics import TopicSettings

#: The most partitions a Kafka client asks for in one topic (librdkafka's limit): a count above it is a mistake in the
#: config, told before anything is applied.
MAX_PARTITIONS = 100_000

SUMMARY = "compare the declared Kafka topics with the cluster (plan) and make it so (apply)"


def add(sub: Any) -> None:
    p = parser(sub, "topics", SUMMARY, "python -m app topics plan --config examples/wordcount.yaml")
    actions = p.add_subparsers(dest="action", required=True)
    for name, summary in (("plan", "print what apply would change, and what it refuses"),
                          ("apply", "create topics, add partitions, set configs; never delete or shrink")):
        a = parser(actions, name, summary, f"python -m app topics {name} --config examples/wordcount.yaml")
        a.add_argument("--config", required=True, metavar="FILE", help="the YAML config file")
        a.add_argument("--json", action="store_true", help="print the plan as JSON")
        a.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    declared = config.declared_topics()
    if not declared:
        msg = f"{args.config}: topics: no topics declared (add a topics: section)"
        raise CommandError(msg, BAD_INPUT)
    _refuse_absurd(declared)
    from app.commands.topics.cluster import KafkaTopicCluster

    k = config.kafka
    cluster = KafkaTopicCluster(k.bootstrap_servers, dict(k.properties), timeout_s=k.request_timeout_s)
    progress(f"reading {len(declared)} topic(s) from {k.bootstrap_servers}")
    if args.action == "plan":
        plan = plan_topics(declared, cluster)
        _print(plan, args.json)
        if plan.refusals:
            return REFUSED
        return PARTIAL if plan.unknowns else OK
    return apply_topics(declared, cluster, as_json=args.json)


def plan_topics(declared: Sequence[TopicSettings], cluster: TopicCluster) -> Plan:
    from app.commands.topics.plan import diff

    _refuse_absurd(declared)
    try:
        return diff(declared, cluster.describe([t.name for t in declared]))
    except ConnectionError as e:
        raise CommandError(str(e), FAILED) from None


def _refuse_absurd(declared: Sequence[TopicSettings]) -> None:
    """A partition count no Kafka client asks for: bad input (exit 2), before the cluster is asked anything."""
    absurd = [f"{t.name} ({t.partitions:,})" for t in declared if t.partitions > MAX_PARTITIONS]
    if absurd:
        msg = (
            f"more partitions than a Kafka client can ask for ({MAX_PARTITIONS:,} at most): "
            f"{', '.join(absurd)}"
        )
        raise CommandError(msg, BAD_INPUT)


def apply_topics(declared: Sequence[TopicSettings], cluster: TopicCluster, *, as_json: bool = False,
                 settle_s: float = 30.0, report: Callable[[str], None] = progress) -> int:
    """Apply the plan; the exit code (0 done or nothing to change, 3 refused, 4 configs unknown, 1 failed)."""
    plan = plan_topics(declared, cluster)
    if plan.refusals:
        _print(plan, as_json)
        report("refused: nothing was applied")
        return REFUSED
    if not plan.changes:
        _print(plan, as_json)
        return PARTIAL if plan.unknowns else OK
    by_name = {t.name: t for t in declared}
    for i, change in enumerate(plan.changes, 1):
        report(f"[{i}/{len(plan.changes)}] {change.describe().splitlines()[0][2:]}")
        try:
            _apply(change, by_name[change.topic], cluster)
        except RuntimeError as e:
            raise CommandError(str(e), FAILED) from None
    after = _settled(declared, cluster, settle_s)
    if after.changes:
        _print(after, as_json)
        msg = f"applied {len(plan.changes)} change(s) but the cluster still differs: {after.summary()}"
        raise CommandError(msg)
    report(f"applied {len(plan.changes)} change(s): {plan.summary()}")
    _print_applied(plan, after, as_json)
    return PARTIAL if after.unknowns else OK


def _apply(change: Change, topic: TopicSettings, cluster: TopicCluster) -> None:
    if change.kind == "create":
        cluster.create(topic)
    elif change.kind == "add_partitions":
        if change.partitions is None:  # the plan gives every add_partitions change its total
            msg = f"topic {change.topic}: an add_partitions change needs a partition count"
            raise ValueError(msg)
        cluster.add_partitions(change.topic, change.partitions)
    else:
        cluster.set_configs(change.topic, change.configs)


def _settled(declared: Sequence[TopicSettings], cluster: TopicCluster, settle_s: float) -> Plan:
    """Plan again until the cluster shows the changes (creation and growth are asynchronous in Kafka)."""
    deadline = time.monotonic() + settle_s
    while True:
        after = plan_topics(declared, cluster)
        if not after.changes or time.monotonic() >= deadline:
            return after
        time.sleep(0.5)


def _print_applied(applied: Plan, after: Plan, as_json: bool) -> None:
    """What an apply changed (the re-plan after it would only say "nothing to change"), and what stays unknown."""
    if as_json:
        print_json({**applied.to_json(), "applied": True, "unknown": after.to_json()["unknown"],
                    "summary": f"applied {len(applied.changes)} change(s): {applied.summary()}"})
        return
    for line in [c.describe() for c in applied.changes] + [u.describe() for u in after.unknowns]:
        print(line)
    print(f"applied {len(applied.changes)} change(s): {applied.summary()}")


def _print(plan: Plan, as_json: bool) -> None:
    if as_json:
        print_json(plan.to_json())
        return
    for line in plan.lines():
        print(line)
    print(plan.summary())
