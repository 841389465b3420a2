"""Compiling validated settings into the Python API's objects: Topology, CoordinatorConfig, StateFactory."""

from __future__ import annotations

from typing import Any

from app.config.parse import AGGREGATORS
from app.config.settings import CompiledPipeline, PipelineSettings, ServiceConfig
from app.coordinator import CoordinatorConfig
from app.topology import Agg, Topology
from spouts.kafka.config import KafkaSpoutConfig, redact
from spouts.protocols import SpoutKind
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory


def spout_config(config: ServiceConfig, p: PipelineSettings) -> KafkaSpoutConfig:
    s, k = p.spout, config.kafka
    return KafkaSpoutConfig(k.bootstrap_servers, topics=s.topics, topic_pattern=s.topic_pattern,
                            first_poll=s.first_poll, first_poll_timestamp_ms=s.first_poll_timestamp_ms,
                            data_loss=s.data_loss, isolation_level=k.isolation_level,
                            discovery_interval_s=s.discovery_interval_s, group_id=s.group_id,
                            request_timeout_s=k.request_timeout_s, read_timeout_s=k.read_timeout_s,
                            properties=dict(k.properties), key_format=s.key_format, value_format=s.value_format,
                            schema_registry=k.schema_registry)


def state_factory(config: ServiceConfig, p: PipelineSettings) -> StateFactory:
    st = p.state
    return StateFactory(kind=st.kind, backend=st.backend,
                        sqlite_path=st.sqlite_path if st.backend == "sqlite" else None,
                        cassandra=config.cassandra if st.backend == "cassandra" else None,
                        cache_size=st.cache_size)


def coordinator_config(config: ServiceConfig, p: PipelineSettings) -> CoordinatorConfig:
    return CoordinatorConfig(caps=p.spout.caps, max_pending=p.max_pending, retention=p.retention,
                             lease_ttl_s=p.lease_ttl_s, owner=config.service.owner, idle_sleep_s=p.idle_sleep_s,
                             accept_at_least_once=p.accept_at_least_once, outage_limit_s=p.outage_limit_s)


def compile_pipeline(config: ServiceConfig, pipeline: PipelineSettings | str, *, metrics: Any = None) -> CompiledPipeline:
    """The topology, coordinator settings and state factory that ``pipeline`` describes.

    ``metrics`` (an :class:`app.metrics.Metrics`) lets the spout publish partition lag.
    """
    from spouts.kafka import KafkaSpout, TransactionalKafkaSpout

    p = config.pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    spout_cls = TransactionalKafkaSpout if p.spout.kind is SpoutKind.TRANSACTIONAL else KafkaSpout
    topology = Topology(p.id, errors=p.errors)
    stream = topology.new_stream(spout_cls(spout_config(config, p), p.id, metrics))
    for kind, exprs in p.transforms:
        stream = stream.filter(exprs[0]) if kind == "filter" else getattr(stream, kind)(*exprs)
    factory = state_factory(config, p)
    aggs = [Agg(AGGREGATORS[a.function](), a.output, a.input) for a in p.aggregates]
    if p.group_by:
        stream.group_by(*p.group_by).persistent_aggregate(factory, aggs, name=p.state.table)
    else:
        stream.persistent_aggregate(factory, aggs, name=p.state.table or p.id.replace("-", "_"))
    return CompiledPipeline(topology, coordinator_config(config, p), factory)


def describe(topology: Topology, coordinator: CoordinatorConfig) -> dict[str, Any]:
    """A plain, comparable, secret-free description of what a topology runs (``validate`` prints it).

    Two topologies with equal descriptions read the same records, run the same transforms and
    write the same tables the same way: the config ≡ Python API test compares these.
    """
    spout = topology.spout
    cfg = getattr(spout, "config", None)
    sinks = []
    for stream, sink in topology.sinks:
        f = sink.factory
        sinks.append({
            "transforms": [[t.kind, *t.exprs] if t.function is None else [t.kind, repr(t.function)]
                           for t in stream.transforms],
            "table": sink.name,
            "group_by": list(getattr(sink, "group_by", ())),
            "aggregates": [{"function": type(a.aggregator).__name__.lower(), "input": a.input, "output": a.output}
                           for a in getattr(sink, "aggregates", ())],
            "state": {"kind": f.kind.value, "backend": f.backend, "sqlite_path": f.sqlite_path,
                      "cassandra": None if f.cassandra is None else _cassandra_summary(f.cassandra),
                      "cache_size": f.cache_size},
        })
    c = coordinator
    return {
        "topology": topology.name,
        "spout": {
            "class": type(spout).__name__, "kind": spout.kind.value if spout is not None else None,
            "bootstrap_servers": cfg.bootstrap_servers if cfg else None,
            "topics": list(cfg.topics) if cfg else None, "topic_pattern": cfg.topic_pattern if cfg else None,
            "first_poll": cfg.first_poll.value if cfg else None,
            "first_poll_timestamp_ms": cfg.first_poll_timestamp_ms if cfg else None,
            "data_loss": cfg.data_loss.value if cfg else None,
            "isolation_level": cfg.isolation_level if cfg else None,
            "discovery_interval_s": cfg.discovery_interval_s if cfg else None,
            "group_id": cfg.group(topology.name) if cfg else None,
            "properties": redact(dict(cfg.properties)) if cfg else None,
            "key_format": cfg.key_format.describe() if cfg else None,
            "value_format": cfg.value_format.describe() if cfg else None,
            "schema_registry": repr(cfg.schema_registry) if cfg and cfg.schema_registry else None,
        },
        "sinks": sinks,
        "errors": topology.errors.describe(),
        "coordinator": {"caps": {"per_partition": c.caps.per_partition, "per_batch": c.caps.per_batch},
                        "max_pending": c.max_pending, "retention": c.retention, "lease_ttl_s": c.lease_ttl_s,
                        "owner": c.owner, "idle_sleep_s": c.idle_sleep_s, "outage_limit_s": c.outage_limit_s,
                        "accept_at_least_once": c.accept_at_least_once},
    }


def _cassandra_summary(s: CassandraSettings) -> dict[str, Any]:
    return {"contact_points": list(s.contact_points), "port": s.port, "keyspace": s.keyspace,
            "local_dc": s.local_dc, "consistency": s.consistency, "serial_consistency": s.serial_consistency,
            "username": s.username, "password": None if s.password is None else "***", "tls": s.tls.enabled}

