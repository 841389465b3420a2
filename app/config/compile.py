"""Compiling the validated config into the Python API's objects: Topology, CoordinatorConfig, StateFactory.

Each runtime object is filled from the model fields of the same name (:func:`.runtime.build`): an option
lives in its model and in the dataclass that uses it, and nowhere in between.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.config.errors import ConfigError
from app.config.runtime import build
from app.config.schema.document import ServiceConfig
from app.config.schema.pipeline import PipelineModel
from app.coordinator.coordinator import CoordinatorConfig
from app.topology.topology import Agg, PersistentAggregate, Topology
from spouts.kafka.config import KafkaSpoutConfig, redact
from spouts.kafka.formats import RecordFormat
from spouts.protocols import SpoutKind
from states.aggregators import CombinerAggregator, Count, First, Latest, Max, Min, Sum
from states.cassandra.settings import CassandraSettings
from states.factory import StateFactory

AGGREGATORS: Mapping[str, type[CombinerAggregator]] = {"count": Count, "sum": Sum, "min": Min, "max": Max,
                                                      "latest": Latest, "first": First}


@dataclass(frozen=True, slots=True)
class CompiledPipeline:
    """One pipeline as the Python API objects the service runs."""

    topology: Topology
    coordinator: CoordinatorConfig
    state: StateFactory

    @property
    def id(self) -> str:
        return self.topology.name

    def store(self) -> Any:
        """The transactional-state store (and lease) of this topology, on the state's backend."""
        return self.state.txstate_store(self.topology.name)

    def claim_tables(self) -> None:
        """Record this topology as the owner of every table it writes, before its first batch.

        Raises :class:`~states.ownership.TableOwnedError` (permanent) when another pipeline owns one.
        """
        from states.ownership import claim_table

        for _, sink in self.topology.sinks:
            claim_table(sink.factory, sink.name, self.topology.name)


def spout_config(config: ServiceConfig, p: PipelineModel) -> KafkaSpoutConfig:
    """The pipeline's spout settings and the cluster's connection, as the Kafka spout takes them."""
    return build(KafkaSpoutConfig, p.spout, config.kafka)


def state_factory(config: ServiceConfig, p: PipelineModel) -> StateFactory:
    cassandra = p.state.backend == "cassandra"
    return build(StateFactory, p.state, cassandra=config.cassandra_settings() if cassandra else None,
                 sqlite_path=None if cassandra else p.state.sqlite_path)


def coordinator_config(config: ServiceConfig, p: PipelineModel) -> CoordinatorConfig:
    if config.service.owner is None:  # a document validated without parse(), which chooses one per process
        msg = ("no lease owner chosen: load the config with app.config.load or parse (they choose one per "
               "process), or set service.owner")
        raise ConfigError(path="service.owner", message=msg)
    return build(CoordinatorConfig, p, p.spout, owner=config.service.owner)


def compile_pipeline(config: ServiceConfig, pipeline: PipelineModel | str, *, metrics: Any = None) -> CompiledPipeline:
    """The topology, coordinator settings and state factory that ``pipeline`` describes.

    ``metrics`` (an :class:`app.metrics.Metrics`) lets the spout publish partition lag.
    """
    from spouts.kafka import KafkaSpout, TransactionalKafkaSpout

    p = config.pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    spout_cls = TransactionalKafkaSpout if p.spout.kind is SpoutKind.TRANSACTIONAL else KafkaSpout
    topology = Topology(p.id, errors=p.error_policy())
    stream = topology.new_stream(spout_cls(spout_config(config, p), p.id, metrics))
    for kind, exprs in (t.step() for t in p.transforms):
        stream = stream.filter(exprs[0]) if kind == "filter" else getattr(stream, kind)(*exprs)
    factory = state_factory(config, p)
    aggs = [Agg(AGGREGATORS[function](), output, input_)
            for function, input_, output in (a.function() for a in p.aggregates)]
    tombstones, ttl_s = p.state.tombstones, p.state.ttl_s
    if p.group_by:
        stream.group_by(*p.group_by).persistent_aggregate(factory, aggs, name=p.state.table, tombstones=tombstones,
                                                          ttl_s=ttl_s)
    else:
        stream.persistent_aggregate(factory, aggs, name=p.state.table or p.id.replace("-", "_"),
                                    tombstones=tombstones, ttl_s=ttl_s)
    return CompiledPipeline(topology, coordinator_config(config, p), factory)


def describe(topology: Topology, coordinator: CoordinatorConfig) -> dict[str, Any]:
    """A plain, comparable, secret-free description of what a topology runs (``validate`` prints it).

    Two topologies with equal descriptions read the same records, run the same transforms and
    write the same tables the same way: the config ≡ Python API test compares these.
    """
    from spouts.kafka import KafkaSpout

    spout = topology.spout
    spout_fields = _spout_summary(spout.config, topology.name) if isinstance(spout, KafkaSpout) else {}
    sinks = []
    for stream, sink in topology.sinks:
        f = sink.factory
        aggregate = sink if isinstance(sink, PersistentAggregate) else None  # else a partition_persist
        sinks.append({
            "transforms": [[t.kind, *t.exprs] if t.function is None else [t.kind, repr(t.function)]
                           for t in stream.transforms],
            "table": sink.name,
            "group_by": list(aggregate.group_by) if aggregate else [],
            "aggregates": [{"function": type(a.aggregator).__name__.lower(), "input": a.input, "output": a.output}
                           for a in (aggregate.aggregates if aggregate else ())],
            "state": {"kind": f.kind.value, "backend": f.backend, "sqlite_path": f.sqlite_path,
                      "cassandra": None if f.cassandra is None else _cassandra_summary(f.cassandra),
                      "cache_size": f.cache_size},
            "tombstones": aggregate.tombstones if aggregate else None,
            "ttl_s": aggregate.ttl_s if aggregate else None,
        })
    return {
        "topology": topology.name,
        "spout": {
            "class": type(spout).__name__, "kind": spout.kind.value if spout is not None else None,
            **spout_fields,
        },
        "sinks": sinks,
        "errors": topology.errors.describe(),
        "coordinator": _plain(coordinator),
    }


def _spout_summary(cfg: KafkaSpoutConfig, topology_id: str) -> dict[str, Any]:
    """Every field of a spout config, plain and secret-free (the group as the spout will use it)."""
    out: dict[str, Any] = _plain(cfg)
    out.update(group_id=cfg.group(topology_id), properties=redact(dict(cfg.properties)),
               schema_registry=repr(cfg.schema_registry) if cfg.schema_registry else None)
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, RecordFormat):
        return v.describe()
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple):
        return list(v)
    return v


def _cassandra_summary(s: CassandraSettings) -> dict[str, Any]:
    return {"contact_points": list(s.contact_points), "port": s.port, "keyspace": s.keyspace,
            "local_dc": s.local_dc, "consistency": s.consistency, "serial_consistency": s.serial_consistency,
            "accept_weak_consistency": s.accept_weak_consistency, "username": s.username,
            "password": None if s.password is None else "***", "tls": s.tls.enabled}

