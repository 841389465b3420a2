"""The config document as pydantic models: every field's type, bounds and default in one place.

The models check the shape of a document after ``${ENV}`` interpolation (so a value from a
variable is converted like one written in the file: ``"3"`` to 3, ``"false"`` to False); what
needs several sections or Spark SQL is checked afterwards by :mod:`.parse`. :func:`json_schema`
exports the same models for editors and for the Helm chart's ``values.schema.json``.
"""

from __future__ import annotations

import enum
import os
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from app.bad_records.error_policy import Action, ErrorPolicy
from app.config.runtime import build
from app.config.topics import TopicSettings
from app.coordinator.lease import unique_owner
from app.spark.masters import state_refusal
from app.topology.guarantees import check_combination
from app.topology.upserts import tombstone_problems
from spouts.kafka.config import FirstPoll, redact
from spouts.kafka.formats import FormatType, RecordFormat, RegistrySettings
from spouts.planner import Caps
from spouts.protocols import DataLossPolicy, SpoutKind
from states.cassandra.guarantees import ConsistencyGap, consistency_gap
from states.cassandra.settings import CONSISTENCY_LEVELS, SERIAL_LEVELS, CassandraSettings, TlsSettings
from states.cassandra.shards import MAX_SHARDS
from states.ownership import check_claimable
from states.spec import StateKind, check_identifier

ENV_REF = r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}"
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PIPELINE_ID = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
AGGREGATORS = ("count", "sum", "min", "max", "latest", "first")


def at(field: str, message: str) -> PydanticCustomError:
    """An error of a model's check that belongs to one of its fields (``field`` may be dotted)."""
    return PydanticCustomError("config", "{message}", {"message": message, "at": field})


def _from_env_int(v: Any) -> Any:
    return int(v) if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v) else v


def _from_env_number(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def _from_env_bool(v: Any) -> Any:
    return v.strip().lower() == "true" if isinstance(v, str) and v.strip().lower() in ("true", "false") else v


def _none_is_empty(empty: Any) -> BeforeValidator:
    return BeforeValidator(lambda v: empty() if v is None else v)


Int = Annotated[StrictInt, BeforeValidator(_from_env_int)]
Number = Annotated[StrictFloat, BeforeValidator(_from_env_number), Field(allow_inf_nan=False)]
Positive = Annotated[Number, Field(gt=0)]
Bool = Annotated[StrictBool, BeforeValidator(_from_env_bool)]
Text = Annotated[StrictStr, Field(min_length=1)]


def _choice(*options: str, upper: bool = False) -> Any:
    def check(v: Any) -> str:
        if not isinstance(v, str) or not v:
            msg = f"expected one of {', '.join(options)}, got {v!r}"
            raise ValueError(msg)
        v = v.upper() if upper else v.lower()
        if v not in options:
            msg = f"{v!r} is not one of {', '.join(options)}"
            raise ValueError(msg)
        return str(v)
    return Annotated[str, PlainValidator(check), WithJsonSchema({"enum": list(options), "type": "string"})]


def _member(kind: type[enum.Enum]) -> Any:
    """A choice among an enum's values, held as the enum member (``opaque`` -> ``SpoutKind.OPAQUE``)."""
    options = [str(m.value) for m in kind]

    def check(v: Any) -> enum.Enum:
        if isinstance(v, kind):
            return v
        if not isinstance(v, str) or not v:
            msg = f"expected one of {', '.join(options)}, got {v!r}"
            raise ValueError(msg)
        try:
            return kind(v.lower())
        except ValueError:
            msg = f"{v.lower()!r} is not one of {', '.join(options)}"
            raise ValueError(msg) from None
    return Annotated[kind, PlainValidator(check), PlainSerializer(lambda m: m.value, return_type=str),
                     WithJsonSchema({"enum": options, "type": "string"})]


def _identifier(what: str, *, stored: bool = False) -> Any:
    def check(v: str) -> str:
        check_identifier(v, what)
        if stored and v.startswith("prev_"):
            msg = (
                f"{what} {v!r}: the prefix prev_ is reserved (opaque state stores the previous value "
                "of each column as prev_<column>)"
            )
            raise ValueError(msg)
        return v
    return Annotated[StrictStr, AfterValidator(check), Field(json_schema_extra={"pattern": r"^[a-z][a-z0-9_]{0,47}$"})]


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (str, int, float)):
        return str(v)
    msg = "must be a scalar (a string, a number or a boolean)"
    raise ValueError(msg)


Scalar = Annotated[str, PlainValidator(_scalar), WithJsonSchema({"type": ["string", "number", "boolean"]})]


def _expression(e: Any) -> str:
    if not isinstance(e, str) or not e.strip():
        msg = f"expected a Spark SQL expression (a non-empty string), got {e!r}"
        raise ValueError(msg)
    return e


Expression = Annotated[str, PlainValidator(_expression), WithJsonSchema({"type": "string", "minLength": 1})]
Expressions = Annotated[list[Expression], BeforeValidator(lambda v: [v] if isinstance(v, str) else v),
                        Field(min_length=1)]


def _topic(name: str) -> str:
    if not _TOPIC.match(name):
        msg = f"invalid topic name {name!r} (letters, digits, '.', '_', '-')"
        raise ValueError(msg)
    return name


Topic = Annotated[StrictStr, AfterValidator(_topic)]


class Section(BaseModel):
    """A mapping with known keys only; an empty value (``state:``) is an empty mapping.

    Free-form maps of settings (``properties``, ``conf``) show with their secrets as ``***`` in a repr.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (redact(value) if name in ("properties", "conf") and isinstance(value, dict) else value)

    @model_validator(mode="before")
    @classmethod
    def _empty(cls, data: Any) -> Any:
        return {} if data is None else data


# -- kafka, spark, http, service ------------------------------------------------------------------

_BROKER = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?")


def _bootstrap(servers: str) -> str:
    """``host:port[,host:port...]``: a garbage address would otherwise look like a broker that is down."""
    for entry in servers.split(","):
        m = _BROKER.fullmatch(entry.strip())
        if m is None or (m.group(1) is not None and not 0 < int(m.group(1)) < 65536):
            msg = f"{entry.strip()!r} is not a broker address (host:port, e.g. kafka-0:9092)"
            raise ValueError(msg)
    return servers


class RegistryModel(Section):
    """A Confluent-compatible Schema Registry (for the avro, protobuf and json_schema formats)."""

    url: Text = Field(description="`http(s)://host:port`; several: comma-separated")
    username: Text | None = Field(default=None, description="basic auth; better from "
                                                             "`TRIDENT_SCHEMA_REGISTRY_USERNAME`")
    password: SecretStr | None = Field(default=None, description="required with `username`; better from "
                                                                 "`TRIDENT_SCHEMA_REGISTRY_PASSWORD`")
    ca_file: Text | None = Field(default=None, description="CA certificates that verify the registry "
                                                           "(none: the system's)")
    cert_file: Text | None = Field(default=None, description="TLS client certificate (with `key_file`)")
    key_file: Text | None = Field(default=None, description="the client certificate's private key")
    key_password: SecretStr | None = Field(default=None, description="the private key's password; better from "
                                                                     "`TRIDENT_SCHEMA_REGISTRY_KEY_PASSWORD`")
    verify: Bool = Field(default=True, description="`false`: do not check the server's certificate")
    timeout_s: Positive = Field(default=10.0, description="per request to the registry")

    @model_validator(mode="after")
    def _settings(self) -> RegistryModel:
        if self.username and self.password is None:
            field = "password"
            raise at(field, "required with a username: set TRIDENT_SCHEMA_REGISTRY_PASSWORD "
                     "(or kafka.schema_registry.password, e.g. from ${A_VARIABLE})")
        try:
            self.settings()
        except ValueError as e:
            raise ValueError(str(e)) from None
        return self

    def settings(self) -> RegistrySettings:
        return build(RegistrySettings, self)


class KafkaModel(Section):
    bootstrap_servers: Annotated[Text, AfterValidator(_bootstrap)] = Field(description=(
        "`host:port[,host:port...]` (an optional `PROTOCOL://` prefix, IPv6 in brackets); `validate` refuses "
        "anything else, since a garbage address would only look like a broker that is down"))
    properties: Annotated[dict[str, Scalar], _none_is_empty(dict)] = Field(default_factory=dict, description=(
        "librdkafka properties passed through (SASL, TLS, timeouts, `client.id`, ...), checked by librdkafka itself "
        "at `validate`. Values are strings; booleans become `true`/`false`. The spout sets `bootstrap.servers`, "
        "`group.id`, `isolation.level`, `enable.auto.commit`, `enable.auto.offset.store`, `enable.partition.eof` "
        "and `auto.offset.reset` itself: naming them is an error. With `security.protocol: SASL_*` and mechanism "
        "`PLAIN`/`SCRAM-*`, `sasl.password` is required (from `TRIDENT_KAFKA_SASL_PASSWORD`)"))
    isolation_level: _choice("read_committed", "read_uncommitted") = Field(  # type: ignore[valid-type]
        default="read_committed", description="`read_uncommitted` also reads records of aborted and open "
                                              "transactions")
    request_timeout_s: Positive = Field(default=10.0, description="bounds a watermark/timestamp query while "
                                                                  "planning a txid")
    read_timeout_s: Positive = Field(default=30.0, description="how long reading a planned range may make no "
                                                               "progress before the partition counts as unavailable")
    reader: _choice("auto", "native", "python") = Field(  # type: ignore[valid-type]
        default="auto", description=(
            "how Spark's read tasks read a range: `native` copies librdkafka's records into Arrow buffers in C (about "
            "0.4 CPU-µs less per record; built by `make venv` and in the image), `python` builds them from "
            "confluent-kafka's messages, `auto` is `native` where it is built (else a warning and `python`). A read "
            "of the `headers` column always takes `python`. Each pipeline logs at start-up which one its reads "
            "take, and why not the native reader"))
    schema_registry: RegistryModel | None = Field(default=None, description=(
        "the Schema Registry of the `avro`, `protobuf` and `json_schema` formats: see "
        "[Record formats](#record-formats)"))


def _removed_reader(v: Any) -> str | None:
    """``spark.kafka_reader``: ``python`` (the only read path, so a no-op) or nothing; the JVM's values are refused."""
    if v is None or (isinstance(v, str) and v.strip().lower() == "python"):
        return None if v is None else "python"
    msg = (
        f"{v!r} is no longer accepted: the JVM read path was removed and Python reads every format "
        "(delete this setting)"
    )
    raise ValueError(msg)


_RemovedReader = Annotated[str | None, PlainValidator(_removed_reader),
                           WithJsonSchema({"enum": ["python"], "type": "string", "deprecated": True})]


class SparkModel(Section):
    master: Text = Field(default="local[*]", description=(
        "`local[*]` is this machine's cores, or in a container with a CPU limit (cgroup quota) that limit rounded "
        "up (`python -m app run` logs `sized to the container: ...`); `local[N]` (task retries are added; a txid "
        "reads in at most N tasks and commits in N, one shuffle partition per core); a cluster master "
        "`spark://...`, `k8s://...`, `yarn` (a txid reads in as many tasks as the executors have cores and "
        "commits in Spark's default parallelism, both chosen again before every txid as executors come and go; "
        "`spark.sql.shuffle.partitions`, unless set, follows the commit tasks). A cluster master needs "
        "`state.backend: cassandra` (`sqlite` is refused: its file is on one machine), an address the executors "
        "reach (`spark.driver.host` or `SPARK_LOCAL_IP`) and this project installed at the service's interpreter "
        'path on the workers: [operations.md](operations.md), "Run on a Spark cluster"'))
    app_name: Text = Field(default="trident", description="the Spark application's name (Spark UI, cluster manager)")
    conf: Annotated[dict[str, Scalar], _none_is_empty(dict)] = Field(default_factory=dict, description=(
        "extra Spark settings (`spark.driver.memory: 2g`, ...); they override the service's defaults. Without "
        "`spark.driver.memory`, a container with a memory limit gets half of it as the driver's heap"))
    executors_gone_s: Positive = Field(default=60.0, description=(
        "a cluster master with no executor for longer: every pipeline `degraded` on `/readyz` with the reason, "
        "an error logged, `trident_spark_executors` at 0"))
    kafka_reader: _RemovedReader = Field(default=None, description=(
        "deprecated, no effect: every format is read by librdkafka in Python workers, the only read path. "
        "`python` is still accepted (`validate` and the start-up log warn: delete the line); `jvm` and `auto` are "
        "refused: the JVM read path (Spark's own Kafka source) was removed, as it was no faster at any size measured "
        'and cost more per txid ([performance.md](performance.md), "One read path")'))

    def deprecated(self) -> list[str]:
        """What to delete from this section: settings that are accepted but do nothing."""
        if self.kafka_reader is None:
            return []
        return ["spark.kafka_reader is deprecated and has no effect (Python reads every format): delete it"]


class HttpModel(Section):
    enabled: Bool = Field(default=True, description="`false`: no HTTP server (no metrics, no probes)")
    host: Text = Field(default="0.0.0.0", description="the address to listen on")  # noqa: S104  probes and scrapes come from other pods
    port: Annotated[Int, Field(ge=0, le=65535)] = Field(default=9400, description=(
        "serves `/metrics` (Prometheus), `/healthz` (200 while the process lives and no pipeline holding its lease is hung: "
        "`service.live_window_s`) and `/readyz`; 0: any free port"))


class ServiceModel(Section):
    owner: Text | None = Field(default=None, description=(
        "the lease owner, shown in logs, `status` and the lease table (none: `<hostname>-<pid>-<random>`). Must be "
        "unique per process: an acquire whose outcome was unknown (a Cassandra timeout) is resolved by reading back "
        "the owner, so two processes of one name could both believe they hold the lease. Leave it unset unless you "
        "generate a unique name"))
    ready_window_s: Positive = Field(default=120.0, description=(
        "`/readyz` says `degraded` when a pipeline holding its lease finished no step for this long: see "
        "[`http`](#http)"))
    live_window_s: Positive = Field(default=600.0, description=(
        "`/healthz` answers 503 (a liveness probe restarts the process) when a pipeline holding its lease finished "
        "no step (a commit, an idle poll or a failed attempt) for this long: a hung coordinator. Keep it above the "
        "longest txid"))
    shutdown_grace_s: Annotated[Number, Field(ge=0)] = Field(default=30.0, description=(
        "after SIGTERM/SIGINT, how long the txid being committed may take to finish before it is abandoned"))
    on_pipeline_failure: _choice("isolate", "exit") = Field(  # type: ignore[valid-type]
        default="isolate", description=(
            "what a permanent failure of one pipeline does to the others. `isolate`: that pipeline stays `failed` "
            "(its thread has ended, its lease is released) while the others go on; the process exits once every "
            "pipeline has stopped. `exit`: every pipeline stops and the process exits at once (one restart of the "
            "pod retries them all). Either way the exit code is the highest of the failed pipelines' (1, or 2 for "
            "configuration), also when a signal ends the process later; the orchestrator's restart is the recovery "
            "of a failed pipeline"))
    standby_ready: Bool = Field(default=False, description=(
        "`/readyz` counts a pipeline waiting as standby as ready (200): for standby replicas behind a rolling "
        "update, where a new pod must turn Ready before an old one stops (the Helm chart sets it with "
        "`replicaCount` > 1)"))
    log_level: _choice("DEBUG", "INFO", "WARNING", "ERROR", upper=True) = Field(  # type: ignore[valid-type]
        default="INFO", description="the service's log level (any case)")

    def owner_or_unique(self) -> str:
        return self.owner or unique_owner()


class AuditModel(Section):
    """Audits the service runs on its own (``python -m app audit`` of every pipeline it holds the lease of)."""

    every_s: Positive | None = Field(default=None, description=(
        "audit each pipeline this often (none: never; `python -m app audit` still runs by hand). The service "
        "recounts from the first offsets to the last committed txid on its own Spark session, compares the tables "
        "and dead letters, sets `trident_audit_last_*` and logs one line per audit; commits go on meanwhile. "
        "Only pipelines whose lease this process holds are audited"))
    max_share: Annotated[Number, Field(gt=0, le=1)] = Field(default=0.2, description=(
        "the most of the service's time audits may take: after an audit that took longer than this share of "
        "`every_s`, the next one waits until it would (the audit's seconds / `max_share`), so a large pipeline "
        "is audited less often rather than slowing its commits"))


# -- cassandra ---------------------------------------------------------------------------------------

_C, _T = CassandraSettings(), TlsSettings()


def _keyspace(name: str) -> str:
    check_identifier(name, "keyspace name")
    if name.startswith("system"):
        msg = f"keyspace {name!r} is Cassandra's own (system*): name the service's keyspace"
        raise ValueError(msg)
    return name


def _hosts(v: Any) -> Any:
    return [h.strip() for h in v.split(",")] if isinstance(v, str) else v


class TlsModel(Section):
    enabled: Bool = Field(default=_T.enabled, description="TLS to the Cassandra nodes")
    ca_file: Text | None = Field(default=None, description="CA certificates that verify the nodes (none: the "
                                                           "system's)")
    cert_file: Text | None = Field(default=None, description="client certificate, for client authentication "
                                                             "(with `key_file`)")
    key_file: Text | None = Field(default=None, description="the client certificate's private key")
    check_hostname: Bool = Field(default=_T.check_hostname, description="the node's certificate must name the "
                                                                        "contact point")


class CassandraModel(Section):
    contact_points: Annotated[list[Text], BeforeValidator(_hosts), Field(min_length=1)] = Field(
        default=list(_C.contact_points), description="hosts: a list or a comma-separated string")
    port: Annotated[Int, Field(ge=1, le=65535)] = Field(default=_C.port, description="the native protocol port")
    keyspace: Annotated[StrictStr, AfterValidator(_keyspace)] = Field(default=_C.keyspace, description=(
        "lower-case identifier, not `system` or `system_*`"))
    local_dc: Text | None = Field(default=None, description="for DC-aware load balancing (none: the first "
                                                            "contact point's data centre); one the cluster does not "
                                                            "have stops `run` and the commands with exit 2, naming "
                                                            "the data centres it reports")
    consistency: _choice(*sorted(CONSISTENCY_LEVELS), upper=True) = Field(  # type: ignore[valid-type]
        default=_C.consistency, description=(
            "reads, plain writes and the commit phase of LWTs; a level below a majority of the keyspace's replicas "
            "is refused (see `accept_weak_consistency`), `ANY` always"))
    serial_consistency: _choice(*sorted(SERIAL_LEVELS), upper=True) = Field(  # type: ignore[valid-type]
        default=_C.serial_consistency, description=(
            "the Paxos phase of LWTs and the reads that resolve unknown outcomes; `LOCAL_SERIAL` on a keyspace "
            "replicated in several data centres is refused (see `accept_weak_consistency`)"))
    accept_weak_consistency: Bool = Field(default=_C.accept_weak_consistency, description=(
        "run a `consistency` and `serial_consistency` that lose exactly-once on the keyspace's replication (below a "
        "majority of its replicas; `LOCAL_*` levels on a keyspace in several data centres) with one warning at "
        "start-up, instead of refusing them with exit 2 (`validate` judges `replication` when `create_keyspace` is "
        'true, `run` the keyspace on the cluster): see "What each consistency pair guarantees" in '
        "[configuration.md](configuration.md). `ANY` and levels the replication can never meet stay refused"))
    username: Text | None = Field(default=None, description="password authentication, with `password`; better "
                                                            "from `TRIDENT_CASSANDRA_USERNAME`")
    password: SecretStr | None = Field(default=None, description="required with `username`; better from "
                                                                 "`TRIDENT_CASSANDRA_PASSWORD`")
    tls: TlsModel = TlsModel()
    max_concurrency: Annotated[Int, Field(ge=1)] = Field(default=_C.max_concurrency, description=(
        "requests in flight per call"))
    max_retries: Annotated[Int, Field(ge=0)] = Field(default=_C.max_retries, description=(
        'retries of reads and plain writes (never of an LWT: see [design.md](design.md), "Unknown outcomes")'))
    backoff_initial_s: Positive = Field(default=_C.backoff_initial_s, description="the first wait before a retry")
    backoff_max_s: Positive = Field(default=_C.backoff_max_s, description="the longest wait before a retry "
                                                                          "(the wait doubles up to it)")
    request_timeout_s: Positive = Field(default=_C.request_timeout_s, description="per request")
    connect_timeout_s: Positive = Field(default=_C.connect_timeout_s, description="per connection attempt")
    reconnect_base_s: Positive = Field(default=_C.reconnect_base_s, description=(
        "a node marked down is tried again after this, doubling up to `reconnect_max_s`"))
    reconnect_max_s: Positive = Field(default=_C.reconnect_max_s, description="see `reconnect_base_s`")
    protocol_version: Annotated[Int, Field(ge=1, le=6)] | None = Field(default=None, description=(
        "the native protocol version (none: v4, or lower if the server needs it; v5 frames are checksummed "
        "in Python by the driver, which costs about a third of the CPU per LWT)"))
    create_keyspace: Bool = Field(default=_C.create_keyspace, description=(
        "`CREATE KEYSPACE IF NOT EXISTS` with `replication` at start-up; set `false` in production and create "
        "the keyspace yourself (then a keyspace that does not exist stops `run` before Spark starts, exit 2)"))
    replication: Annotated[dict[str, Scalar], _none_is_empty(dict)] = Field(default=dict(_C.replication), description=(
        "the keyspace's replication, when `create_keyspace` creates it"))
    shards: Annotated[Int, Field(ge=0, le=MAX_SHARDS)] = Field(default=_C.shards, description=(
        "0: a partition per key. N: new state tables keep their keys in N partitions (`PRIMARY KEY ((shard), "
        "key)`), so a commit is one conditional batch per shard instead of one LWT per key (several times "
        "cheaper for Cassandra); for key spaces up to a few million keys. Fixed per table when it is created "
        "(`python -m app migrate` copies a table to another layout). On Cassandra 5.0 a sharded table is created "
        "with a storage-attached index on its key columns, so cqlsh reads a key without its shard (`SELECT word, "
        "count FROM trident.word_counts WHERE word = 'the'`); on 4.x list every shard (see "
        '[operations.md](operations.md), "Reading results"). See [design.md](design.md), "Sharded tables"'))

    @model_validator(mode="after")
    def _credentials(self) -> CassandraModel:
        if self.username and self.password is None:
            field = "password"
            raise at(field, "required with a username: set TRIDENT_CASSANDRA_PASSWORD "
                     "(or cassandra.password, e.g. from ${A_VARIABLE})")
        if self.password is not None and not self.username:
            field = "username"
            raise at(field, "required with a password: set TRIDENT_CASSANDRA_USERNAME "
                     "(or cassandra.username)")
        try:
            self.settings()
        except ValueError as e:
            raise ValueError(str(e)) from None
        return self

    @model_validator(mode="after")
    def _guarantees(self) -> CassandraModel:
        """A pair that loses exactly-once on the replication ``create_keyspace`` creates the keyspace with
        (``run`` checks the keyspace the cluster has, :mod:`app.service.access`)."""
        replication = self.settings().replication if self.create_keyspace else None
        gap = consistency_gap(self.consistency, self.serial_consistency, replication, self.local_dc,
                              "from cassandra.replication")
        if gap is not None and not (gap.waivable and self.accept_weak_consistency):
            raise at(gap.setting, consistency_refusal(gap))
        return self

    def settings(self) -> CassandraSettings:
        return build(CassandraSettings, self)


def consistency_refusal(gap: ConsistencyGap) -> str:
    """The one line refusing ``gap``, with the opt-in when there is one."""
    line = gap.reason
    if gap.waivable:
        line += "; or set cassandra.accept_weak_consistency: true to run without this guarantee"
    return line


# -- pipelines ----------------------------------------------------------------------------------------

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

    type: _member(FormatType) = FormatType.BYTES  # type: ignore[valid-type]
    fields: Annotated[dict[str, Text], _none_is_empty(dict)] = Field(
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
    kind: _member(SpoutKind) = Field(default=SpoutKind.OPAQUE, description=(  # type: ignore[valid-type]
        "`opaque`: a partition without a leader gets an empty range and the batch goes on (a replay before freezing "
        "may differ). `transactional`: a txid's ranges are fixed at planning; an unreadable partition makes the "
        "batch wait"))
    topics: Annotated[list[Topic], _none_is_empty(list)] = Field(default_factory=list, description=(
        "the topics to read; exactly one of `topics` and `topic_pattern`"))
    topic_pattern: Annotated[Text, AfterValidator(_pattern)] | None = Field(default=None, description=(
        "a regular expression matching whole topic names (internal `__*` topics never match)"))
    first_poll: _member(FirstPoll) = Field(default=FirstPoll.UNCOMMITTED_EARLIEST, description=(  # type: ignore[valid-type]
        "where a partition without stored metadata starts; the `uncommitted_*` strategies resume from stored "
        "metadata whenever there is some"))
    first_poll_timestamp_ms: Annotated[Int, Field(ge=0)] | None = Field(default=None, description=(
        "required with a `*timestamp` strategy"))
    caps: CapsModel = CapsModel()
    data_loss: _member(DataLossPolicy) = Field(default=DataLossPolicy.FAIL, description=(  # type: ignore[valid-type]
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
    as_: _identifier("aggregate output column", stored=True) | None = Field(default=None, alias="as")  # type: ignore[valid-type]


class FieldAggregateModel(Section):
    field: _identifier("aggregate input field") = Field(description="a column after the transforms")  # type: ignore[valid-type]
    as_: _identifier("aggregate output column", stored=True) | None = Field(default=None, alias="as")  # type: ignore[valid-type]


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
    kind: _member(StateKind) = Field(default=StateKind.OPAQUE, description=(  # type: ignore[valid-type]
        "the fault-tolerance rule of the state: see below"))
    backend: _choice("sqlite", "cassandra") = Field(default="sqlite", description=(  # type: ignore[valid-type]
        "`sqlite` (embedded, one machine) or `cassandra` (needs the `cassandra` section)"))
    table: _identifier("table name") | None = Field(default=None, description=(  # type: ignore[valid-type]
        "lower-case identifier (none: `<id>_<group_by...>`, `-` as `_`): `word_counts`; not `trident_state`, "
        "`trident_state_lease` or `trident_table_owners`; written by this pipeline only"))
    sqlite_path: Text = Field(default="data/trident.db", description=(
        "relative to the working directory; its directory is created. `validate` and `run` refuse a path that "
        "cannot be (a file where a directory should be, no write permission)"))
    cache_size: Annotated[Int, Field(ge=0)] = Field(default=10_000, description=(
        "keys cached in front of the table per process; a Spark commit partition caches at least this many and "
        'always every key of its last txid (0 disables; see "The commit path" in design.md)'))
    tombstones: _choice("delete", "ignore") | None = Field(  # type: ignore[valid-type]
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


ErrorsModel = Annotated[_choice("fail", "skip") | DeadLetterModel,  # type: ignore[valid-type]
                        Field(description="what a bad record does: fail (stop, exit 1), skip (count it) or "
                                          "{dead_letter: {topic: ...}}")]


def _pipeline_id(pid: str) -> str:
    if not _PIPELINE_ID.match(pid):
        msg = (
            f"invalid pipeline id {pid!r} (use 1-48 lower-case letters, digits, '-' and '_', "
            "starting with a letter)"
        )
        raise ValueError(msg)
    return pid


class PipelineModel(Section):
    id: Annotated[StrictStr, AfterValidator(_pipeline_id),
                  Field(json_schema_extra={"pattern": _PIPELINE_ID.pattern})] = Field(description=(
        "the topology id: 1-48 of `a-z 0-9 - _`, starting with a letter; unique. A new id starts from "
        "`first_poll`; an existing one resumes"))
    spout: SpoutModel = Field(description="what to read: see [`spout`](#spout)")
    transforms: Annotated[list[TransformModel], _none_is_empty(list)] = Field(default_factory=list, description=(
        "the steps on the records: see [`transforms`](#transforms)"))
    group_by: Annotated[list[_identifier("group-by field", stored=True)], _none_is_empty(list)] = Field(  # type: ignore[valid-type]
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


# -- topics --------------------------------------------------------------------------------------------

class TopicModel(Section):
    partitions: Annotated[Int, Field(ge=1)] = Field(description=(
        "`apply` adds partitions up to it and refuses fewer than the topic has"))
    replication_factor: Annotated[Int, Field(ge=1)] | None = Field(default=None, description=(
        "none: the broker default (on creation); `apply` refuses a value different from the topic's (that is a "
        "partition reassignment)"))
    configs: Annotated[dict[str, Scalar], _none_is_empty(dict)] = Field(default_factory=dict, description=(
        "topic configs, set with IncrementalAlterConfigs (undeclared ones are left alone). Values are scalars, sent "
        "as strings. Checked here: `retention.ms`, `retention.bytes` (integers >= -1), `min.insync.replicas` (>= 1 "
        "and not above `replication_factor`), `segment.ms`, `segment.bytes`, `max.message.bytes`, "
        "`delete.retention.ms`, `min.compaction.lag.ms` (integers), `cleanup.policy` (`delete`, `compact` or both), "
        "`compression.type` (`uncompressed`, `zstd`, `lz4`, `snappy`, `gzip`, `producer`), "
        "`message.timestamp.type` (`CreateTime`, `LogAppendTime`)"))

    @model_validator(mode="before")
    @classmethod
    def _declared(cls, data: Any) -> Any:
        if data is None:
            msg = "declare at least partitions"
            raise ValueError(msg)
        return data

    @model_validator(mode="after")
    def _configs(self) -> TopicModel:
        from app.config.topics import TopicConfigError, check_configs

        try:
            object.__setattr__(self, "configs", check_configs(self.configs, self.replication_factor))
        except TopicConfigError as e:
            field = f"configs.{e.key}"
            raise at(field, e.message) from None
        return self


# -- the document ------------------------------------------------------------------------------------

class Document(Section):
    """A service config: connections, Spark, the HTTP server, the service, pipelines and topics."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="trident-stream config")

    kafka: KafkaModel
    cassandra: CassandraModel | None = Field(default=None, description="required when a state backend is cassandra")
    spark: SparkModel = SparkModel()
    http: HttpModel = HttpModel()
    service: ServiceModel = ServiceModel()
    audit: AuditModel = AuditModel()
    pipelines: Annotated[list[PipelineModel], Field(min_length=1)]
    topics: Annotated[dict[Topic, TopicModel], _none_is_empty(dict)] = Field(default_factory=dict)

    def pipeline(self, pipeline_id: str) -> PipelineModel:
        """The pipeline of id ``pipeline_id`` (KeyError when there is none)."""
        for p in self.pipelines:
            if p.id == pipeline_id:
                return p
        raise KeyError(pipeline_id)

    def declared_topics(self) -> tuple[TopicSettings, ...]:
        """The ``topics:`` section, one entry per topic (what ``topics plan|apply`` compares)."""
        return tuple(build(TopicSettings, t, name=name) for name, t in self.topics.items())

    def cassandra_settings(self) -> CassandraSettings | None:
        """The Cassandra connection the states take (None without a ``cassandra`` section)."""
        return None if self.cassandra is None else self.cassandra.settings()

    @model_validator(mode="after")
    def _across_pipelines(self) -> Document:
        seen: dict[str, int] = {}
        writers: dict[tuple[str, str, str], int] = {}
        for i, p in enumerate(self.pipelines):
            if p.id in seen:
                field = f"pipelines[{i}].id"
                raise at(field, f"duplicate pipeline id {p.id!r} (also pipelines[{seen[p.id]}].id)")
            seen[p.id] = i
            for part in ("key", "value"):
                if getattr(p.spout, f"{part}_format").format().type.registry and self.kafka.schema_registry is None:
                    field = f"pipelines[{i}].spout.{part}_format"
                    raise at(field, "a registry format needs kafka.schema_registry "
                             "(its url)")
            if p.state.backend == "cassandra" and self.cassandra is None:
                field = f"pipelines[{i}].state.backend"
                raise at(field, "backend cassandra needs a top-level cassandra section")
            refusal = state_refusal(p.state.backend, self.spark.master)
            if refusal is not None:  # a state on one machine's disk would split between a cluster's executors
                field = f"pipelines[{i}].state.backend"
                raise at(field, refusal)
            where = os.path.abspath(p.state.sqlite_path) if p.state.backend == "sqlite" else "cassandra"  # noqa: PTH100  normalised like abspath, symlinks not resolved
            key = (p.state.backend, where, p.table())
            if key in writers:
                other = self.pipelines[writers[key]]
                field = f"pipelines[{i}].state.table"
                raise at(field, f"table {key[2]!r} is also written by pipeline {other.id!r} "
                         f"(pipelines[{writers[key]}]): a state table belongs to one "
                         "pipeline")
            writers[key] = i
        return self


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a config file, for editors and the Helm chart.

    Every number and boolean may also be written as a ``${VAR}`` reference (converted after
    interpolation), so those accept a string of that shape too.
    """
    schema = Document.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    allowed: dict[str, Any] = _env_refs_allowed(schema)
    return allowed


#: Bounds pydantic leaves under its own names when a validator wraps the constrained type.
_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _env_refs_allowed(node: Any) -> Any:
    if isinstance(node, list):
        return [_env_refs_allowed(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {_BOUNDS.get(k, k): _env_refs_allowed(v) for k, v in node.items()}
    if node.get("type") in ("integer", "number", "boolean"):
        typed = {k: node.pop(k) for k in list(node) if k not in ("title", "description", "default")}
        node["anyOf"] = [typed, {"type": "string", "pattern": f"^{ENV_REF}$"}]
    return node


def chart_schema() -> dict[str, Any]:
    """:func:`json_schema` with every ``$ref`` inlined: the ``config`` property of the Helm chart's
    ``values.schema.json`` (a reference there would resolve against the chart's own root)."""
    schema = json_schema()
    defs = schema.pop("$defs", {})
    schema.pop("$schema", None)

    def inline(node: Any) -> Any:
        if isinstance(node, list):
            return [inline(n) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = inline(defs[node["$ref"].rsplit("/", 1)[1]])
            return {**target, **{k: inline(v) for k, v in node.items() if k != "$ref"}}
        return {k: inline(v) for k, v in node.items()}

    out: dict[str, Any] = inline(schema)
    out["description"] = "The pipeline config (docs/configuration.md; python -m app validate --schema)"
    return out


#: The service's configuration: the validated document (:func:`app.config.parse` fixes the lease owner).
ServiceConfig = Document
