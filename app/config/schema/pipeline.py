"""A pipeline in ``pipelines:``: its spout, transforms, aggregates, state and error policy."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    StrictStr,
    model_validator,
)

from app.bad_records.error_policy import Action, ErrorPolicy
from app.config.runtime import build
from app.config.schema.fields import (
    AGGREGATORS,
    PIPELINE_ID,
    Bool,
    Expression,
    Expressions,
    Int,
    Number,
    Positive,
    Section,
    Text,
    Topic,
    at,
    choice,
    identifier,
    member,
    none_is_empty,
)
from app.topology.guarantees import check_combination
from app.topology.upserts import tombstone_problems
from spouts.kafka.config import FirstPoll
from spouts.kafka.formats import FormatType, RecordFormat
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.ownership import check_claimable
from states.spec import StateKind


class CapsModel(Section):
    per_partition: Annotated[Int, Field(ge=1)] = Field(default=Caps().per_partition, description=(
        "offsets per partition per txid"))
    per_batch: Annotated[Int, Field(ge=1)] = Field(default=Caps().per_batch, description="offsets per txid in all")


def _pattern(p: str) -> str:
    try:
        re.compile(p)
    except re.error as e:
        msg = f"not a regular expression: {e}"
        raise ValueError(msg) from None
    return p


def _format_schema(schema: dict[str, Any]) -> None:
    """A format: its name alone, or a mapping with its type and options."""
    mapping = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "string", "enum": [f.value for f in FormatType]}, mapping]


class FormatModel(Section):
    """``string``, or ``{type: json, fields: {name: type}}``, ``{type: avro, subject: ..., version: ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_format_schema)

    type: member(FormatType) = FormatType.BYTES  # type: ignore[valid-type]
    fields: Annotated[dict[str, Text], none_is_empty(dict)] = Field(
        default_factory=dict, description="json: the declared fields and their types (string, bigint, double, "
                                          "boolean, int, float, date, timestamp, decimal(p,s))")
    subject: Text | None = Field(default=None, description="registry formats; default <topic>-key / <topic>-value")
    version: Annotated[Int, Field(ge=1)] | None = Field(default=None, description="reader schema: this version")
    schema_id: Annotated[Int, Field(ge=0)] | None = Field(default=None, description="reader schema: this id")
    message: Text | None = Field(default=None, description="protobuf: the message's full name")

    @model_validator(mode="before")
    @classmethod
    def _name(cls, data: Any) -> Any:
        return {"type": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _valid(self) -> FormatModel:
        self.format()
        return self

    def format(self) -> RecordFormat:
        return build(RecordFormat, self)


class SpoutModel(Section):
    kind: member(SpoutKind) = Field(default=SpoutKind.OPAQUE, description=(  # type: ignore[valid-type]
        "`opaque`: a partition without a leader gets an empty range and the batch goes on (a replay before freezing "
        "may differ). `transactional`: a txid's ranges are fixed at planning; an unreadable partition makes the "
        "batch wait"))
    topics: Annotated[list[Topic], none_is_empty(list)] = Field(default_factory=list, description=(
        "the topics to read; exactly one of `topics` and `topic_pattern`"))
    topic_pattern: Annotated[Text, AfterValidator(_pattern)] | None = Field(default=None, description=(
        "a regular expression matching whole topic names (internal `__*` topics never match)"))
    first_poll: member(FirstPoll) = Field(default=FirstPoll.UNCOMMITTED_EARLIEST, description=(  # type: ignore[valid-type]
        "where a partition without stored metadata starts; the `uncommitted_*` strategies resume from stored "
        "metadata whenever there is some"))
    first_poll_timestamp_ms: Annotated[Int, Field(ge=0)] | None = Field(default=None, description=(
        "required with a `*timestamp` strategy"))
    caps: CapsModel = CapsModel()
    data_loss: member(DataLossPolicy) = Field(default=DataLossPolicy.FAIL, description=(  # type: ignore[valid-type]
        "offsets gone from the log (retention) before they were read, a topic re-created (told by its topic id) "
        "or a log truncated under the stored position: `fail` stops the pipeline; `skip` continues from the log "
        "start (a re-created topic: the new log's start; a truncated log of the same id: its end), counts "
        "`trident_data_loss_*` and logs it"))
    discovery_interval_s: Annotated[Number, Field(ge=0)] = Field(default=30.0, description=(
        "how often partitions and pattern-matched topics are re-listed (0: before every txid)"))
    group_id: Text | None = Field(default=None, description=(
        "consumer group the committed offsets are published to (none: `trident-<id>`), **for monitoring only** "
        "(lag dashboards, `kafka-consumer-groups`); never read back"))
    key_format: FormatModel = Field(default=FormatModel(), description=(
        "how keys are decoded into a typed `key` column (default `bytes`): see [Record formats](#record-formats)"))
    value_format: FormatModel = Field(default=FormatModel(), description=(
        "how values are decoded into a typed `value` column (default `bytes`): see "
        "[Record formats](#record-formats)"))

    @model_validator(mode="after")
    def _source(self) -> SpoutModel:
        if bool(self.topics) == (self.topic_pattern is not None):
            msg = "set exactly one of topics (a non-empty list) or topic_pattern (a regular expression)"
            raise ValueError(msg)
        for part in ("key", "value"):
            fmt = getattr(self, f"{part}_format").format()
            if fmt.type.registry:
                try:
                    fmt.subject_for(tuple(self.topics), part)
                except ValueError as e:
                    field = f"{part}_format.subject"
                    raise at(field, str(e)) from None
        if self.first_poll.position == "timestamp" and self.first_poll_timestamp_ms is None:
            field = "first_poll_timestamp_ms"
            raise at(field, f"first_poll {self.first_poll.value} needs it")
        return self


class TransformModel(Section):
    """One step: ``{map: [...]}``, ``{each: [...]}`` or ``{filter: predicate}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra={"minProperties": 1, "maxProperties": 1})

    map: Expressions | None = None
    each: Expressions | None = None
    filter: Expression | None = None

    @model_validator(mode="before")
    @classmethod
    def _one(cls, data: Any) -> Any:
        if not isinstance(data, dict) or len(data) != 1 or next(iter(data)) not in ("map", "each", "filter"):
            msg = "a transform is one of {map: [expressions]}, {each: [expressions]} or {filter: predicate}"
            raise ValueError(msg)
        return data

    def step(self) -> tuple[str, tuple[str, ...]]:
        if self.filter is not None:
            return "filter", (self.filter,)
        return ("map", tuple(self.map)) if self.map is not None else ("each", tuple(self.each or ()))


class CountModel(Section):
    as_: identifier("aggregate output column", stored=True) | None = Field(default=None, alias="as")  # type: ignore[valid-type]


class FieldAggregateModel(Section):
    field: identifier("aggregate input field") = Field(description="a column after the transforms")  # type: ignore[valid-type]
    as_: identifier("aggregate output column", stored=True) | None = Field(default=None, alias="as")  # type: ignore[valid-type]


def _one_key_or_name(schema: dict[str, Any]) -> None:
    """The JSON Schema of an aggregate: a bare aggregator name, or a mapping with exactly one of them."""
    mapping = dict(schema, minProperties=1, maxProperties=1)
    schema.clear()
    schema["anyOf"] = [{"type": "string", "enum": list(AGGREGATORS)}, mapping]


class AggregateModel(Section):
    """``- count``, ``{count: {as: n}}`` or ``{sum|min|max|latest|first: {field: f, as: out}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, json_schema_extra=_one_key_or_name)

    count: CountModel | None = None
    sum: FieldAggregateModel | None = None
    min: FieldAggregateModel | None = None
    max: FieldAggregateModel | None = None
    latest: FieldAggregateModel | None = Field(default=None, description="the value of the newest record "
                                               "(timestamp, partition, offset) per key: an upsert")
    first: FieldAggregateModel | None = Field(default=None, description="the value of the oldest record per key")

    @model_validator(mode="before")
    @classmethod
    def _one(cls, data: Any) -> Any:
        if isinstance(data, str):
            data = {data: None}
        if not isinstance(data, dict) or len(data) != 1 or next(iter(data)) not in AGGREGATORS:
            msg = (
                f"an aggregate is one of {sorted(AGGREGATORS)} with its options, "
                "e.g. {sum: {field: amount, as: total}}"
            )
            raise ValueError(msg)
        return {k: {} if v is None else v for k, v in data.items()}

    def function(self) -> tuple[str, str | None, str]:
        """(aggregator, input field or None, output column)."""
        name = next(n for n in AGGREGATORS if getattr(self, n) is not None)
        body = getattr(self, name)
        return name, getattr(body, "field", None), body.as_ or name


class StateModel(Section):
    kind: member(StateKind) = Field(default=StateKind.OPAQUE, description=(  # type: ignore[valid-type]
        "the fault-tolerance rule of the state: see below"))
    backend: choice("sqlite", "cassandra") = Field(default="sqlite", description=(  # type: ignore[valid-type]
        "`sqlite` (embedded, one machine) or `cassandra` (needs the `cassandra` section)"))
    table: identifier("table name") | None = Field(default=None, description=(  # type: ignore[valid-type]
        "lower-case identifier (none: `<id>_<group_by...>`, `-` as `_`): `word_counts`; not `trident_state`, "
        "`trident_state_lease` or `trident_table_owners`; written by this pipeline only"))
    sqlite_path: Text = Field(default="data/trident.db", description=(
        "relative to the working directory; its directory is created. `validate` and `run` refuse a path that "
        "cannot be (a file where a directory should be, no write permission)"))
    cache_size: Annotated[Int, Field(ge=0)] = Field(default=10_000, description=(
        "keys cached in front of the table per process; a Spark commit partition caches at least this many and "
        'always every key of its last txid (0 disables; see "The commit path" in design.md)'))
    tombstones: choice("delete", "ignore") | None = Field(  # type: ignore[valid-type]
        default=None, description=(
            "a record with a null value: `delete` deletes its key (every aggregate must be `latest`); `ignore` skips "
            "it; none: aggregated like any record. See [Upserts](#upserts)"))
    ttl_s: Annotated[Int, Field(ge=1)] | None = Field(default=None, description=(
        "seconds; every write of a key sets its row to expire that long after (`USING TTL`); backend `cassandra` "
        "only (`validate` refuses it on `sqlite`: its rows do not expire). The table is created with "
        "`gc_grace_seconds = 10800` and tombstone compactions, so expired rows are purged within hours: see "
        '[Upserts](#upserts), "TTL"'))

    @model_validator(mode="after")
    def _ttl(self) -> StateModel:
        if self.ttl_s is not None and self.backend != "cassandra":
            field = "ttl_s"
            raise at(field, f"needs backend cassandra (backend {self.backend} keeps rows for ever)")
        return self


class DeadLetterTopicModel(Section):
    topic: Topic = Field(description="the dead-letter topic (on the cluster the pipeline reads)")


class DeadLetterModel(Section):
    """``{dead_letter: {topic: ...}}``: a bad record goes to that topic with its source and error as headers."""

    dead_letter: DeadLetterTopicModel


ErrorsModel = Annotated[choice("fail", "skip") | DeadLetterModel,  # type: ignore[valid-type]
                        Field(description="what a bad record does: fail (stop, exit 1), skip (count it) or "
                                          "{dead_letter: {topic: ...}}")]


def _pipeline_id(pid: str) -> str:
    if not PIPELINE_ID.match(pid):
        msg = (
            f"invalid pipeline id {pid!r} (use 1-48 lower-case letters, digits, '-' and '_', "
            "starting with a letter)"
        )
        raise ValueError(msg)
    return pid


class PipelineModel(Section):
    id: Annotated[StrictStr, AfterValidator(_pipeline_id),
                  Field(json_schema_extra={"pattern": PIPELINE_ID.pattern})] = Field(description=(
        "the topology id: 1-48 of `a-z 0-9 - _`, starting with a letter; unique. A new id starts from "
        "`first_poll`; an existing one resumes"))
    spout: SpoutModel = Field(description="what to read: see [`spout`](#spout)")
    transforms: Annotated[list[TransformModel], none_is_empty(list)] = Field(default_factory=list, description=(
        "the steps on the records: see [`transforms`](#transforms)"))
    group_by: Annotated[list[identifier("group-by field", stored=True)], none_is_empty(list)] = Field(  # type: ignore[valid-type]
        default_factory=list, description=(
            "columns after the transforms to group by; none means one global aggregate (a single row). Not `txid` "
            "or `prev_*`"))
    aggregates: Annotated[list[AggregateModel], Field(min_length=1)] = Field(description=(
        "what is stored per key: see [`aggregates`](#aggregates)"))
    state: StateModel = Field(default=StateModel(), description="where and how: see [`state`](#state)")
    max_pending: Annotated[Int, Field(ge=1)] = Field(default=2, description=(
        "txids processed at once; commits are still one at a time, in txid order. 2 (where the Python API's "
        "`CoordinatorConfig` defaults to 1) lets Spark process txid N+1 while N commits, so a service hides its "
        "commit latency; 1 halves the records held in flight"))
    accept_at_least_once: Bool = Field(default=False, description=(
        "allow a `non_transactional` state (replays count again)"))
    lease_ttl_s: Positive = Field(default=30.0, description=(
        "the lease's time to live. It is renewed every third of it by a heartbeat of its own, whatever a batch is "
        "doing; when no renewal has succeeded for 80% of it the pipeline stops before the lease could expire (see "
        "[Standby](#standby-and-the-lease))"))
    outage_limit_s: Positive | None = Field(default=1800.0, description=(
        "how long transient failures (a broker, Cassandra or the network away) are ridden out with no commit and "
        "no idle step; then the pipeline stops with exit 1. `null`: ride them out for ever"))
    retention: Annotated[Int, Field(ge=2)] = Field(default=16, description=(
        "txids of batch metadata kept in the store (the last committed and the one being committed at least)"))
    errors: ErrorsModel = Field(default="fail", description=(  # type: ignore[valid-type]
        "what a bad record does: `fail`, `skip` or `{dead_letter: {topic: NAME}}`; see [Bad records](#bad-records)"))
    idle_sleep_s: Annotated[Number, Field(ge=0)] = Field(default=0.5, description=(
        "wait when there is nothing new to read"))

    def error_policy(self) -> ErrorPolicy:
        """What a bad record does, as the topology takes it."""
        errors: Any = self.errors
        if isinstance(errors, DeadLetterModel):
            return ErrorPolicy.dead_letter(errors.dead_letter.topic)
        return ErrorPolicy(Action(errors))

    def table(self) -> str:
        """The state table: ``state.table``, else the id (``-`` as ``_``) and the group-by fields."""
        return self.state.table or "_".join((self.id.replace("-", "_"), *self.group_by))

    @model_validator(mode="after")
    def _consistent(self) -> PipelineModel:
        outputs = [a.function()[2] for a in self.aggregates]
        functions = [(a.function()[0], a.function()[2]) for a in self.aggregates]
        for i, problem in tombstone_problems(self.state.tombstones, functions):
            field = f"aggregates[{i}]"
            raise at(field, f"state.{problem}")
        for i, out in enumerate(outputs):
            if outputs.count(out) > 1 or out in self.group_by:
                field = f"aggregates[{i}]"
                raise at(field, f"output column {out!r} is used twice (group-by fields and aggregate "
                         "outputs need distinct names)")
        try:
            check_combination(self.spout.kind, self.state.kind,
                              accept_at_least_once=self.accept_at_least_once)
        except ValueError as e:
            field = "state.kind"
            raise at(field, str(e)) from None
        try:
            check_claimable(self.table())
        except ValueError as e:
            raise at("state.table" if self.state.table else "id", str(e)) from None
        return self
