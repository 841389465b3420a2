"""Running commands in-process, configs for them, and a pipeline run in-process (the batch protocol, no Spark)."""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from app.__main__ import main
from app.config import compile_pipeline, load
from app.coordinator.coordinator import Coordinator, CoordinatorConfig
from app.topology.local import LocalExecutor, Sink
from states import factory as state_factory
from states.aggregators import Count
from states.spec import Column, MapSpec, StateKind

WORDS_SPEC = MapSpec("word_counts", StateKind.OPAQUE, (Column("word", "text"),), (Column("count", "bigint"),))


@dataclass
class Result:
    code: int
    out: str
    err: str


def forget_opened() -> None:
    """Drop the states and stores this process opened, so the next step opens them as a new process would."""
    state_factory._opened.clear()


def cli(*argv: str) -> Result:
    """``python -m app ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    forget_opened()  # the next command opens its stores afresh, as a new process would
    return Result(code, out.getvalue(), err.getvalue())


def write_config(path: Path, *, bootstrap: str, topic: str, state: dict[str, Any], pipeline_id: str = "wc",
                 cassandra: Any = None, cassandra_extra: dict[str, Any] | None = None,
                 topics: dict[str, Any] | None = None, kafka_extra: dict[str, Any] | None = None,
                 **pipeline: Any) -> Path:
    """A word-count config (``state``: the state section; ``cassandra``: CassandraSettings of a test peer;
    ``kafka_extra``: more of the ``kafka:`` section, e.g. a shorter timeout where the test waits one out)."""
    doc: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "request_timeout_s": 3, "read_timeout_s": 5, **(kafka_extra or {})},
        "pipelines": [{"id": pipeline_id, "spout": {"topics": [topic], "first_poll": "earliest",
                                                    "discovery_interval_s": 0},
                       "transforms": [{"map": ["explode(split(CAST(value AS STRING), ' ')) AS word"]}],
                       "group_by": ["word"], "aggregates": [{"count": {"as": "count"}}],
                       "state": {"table": "word_counts", **state}, "idle_sleep_s": 0.05, **pipeline}],
    }
    if cassandra is not None:
        doc["cassandra"] = {"contact_points": list(cassandra.contact_points), "port": cassandra.port,
                            "keyspace": cassandra.keyspace, "local_dc": cassandra.local_dc,
                            "protocol_version": cassandra.protocol_version,
                            "backoff_initial_s": 0.02, "max_retries": 8, **(cassandra_extra or {})}
        if cassandra.shards is not None:
            doc["cassandra"]["shards"] = cassandra.shards
        if cassandra.username:
            doc["cassandra"]["username"] = cassandra.username
            doc["cassandra"]["password"] = cassandra.password.get()
    if topics is not None:
        doc["topics"] = topics
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_pipeline(config_path: Path, pipeline_id: str = "wc", owner: str = "test-service") -> int:
    """Run the config's pipeline until idle through the real coordinator and Kafka spout, counting words in
    Python instead of Spark (the same batch protocol and state writes); returns the txids committed."""
    coordinator = pipeline_coordinator(config_path, pipeline_id, owner)
    try:
        return coordinator.run_until_idle()
    finally:
        coordinator.close()
        forget_opened()


def pipeline_coordinator(config_path: Path, pipeline_id: str = "wc", owner: str = "test-service") -> Coordinator:
    """The coordinator ``run`` would drive for the pipeline (not started), with a Python executor."""
    config = load(config_path)
    compiled = compile_pipeline(config, pipeline_id)
    spout = compiled.topology.spout
    assert spout is not None
    state = compiled.state.make_state(WORDS_SPEC)
    executor = LocalExecutor(spout.emitter(), [Sink(state, Count(), key=lambda w: (w,))],
                             flat_map=lambda r: (r.value or b"").decode().split())
    cfg = CoordinatorConfig(caps=compiled.coordinator.caps, max_pending=1, owner=owner, idle_sleep_s=0.01)
    return Coordinator(pipeline_id, spout, executor, compiled.store(), cfg)


def words_of(values: list[bytes]) -> Counter[str]:
    return Counter(w for v in values for w in v.decode().split())
