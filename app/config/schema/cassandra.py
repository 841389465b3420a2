"""The ``cassandra:`` section: contact points, credentials, TLS, consistency and timeouts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    SecretStr,
    StrictStr,
    model_validator,
)

from app.config.runtime import build
from app.config.schema.fields import Bool, Int, Positive, Scalar, Section, Text, at, choice, none_is_empty
from states.cassandra.guarantees import ConsistencyGap, consistency_gap
from states.cassandra.settings import CONSISTENCY_LEVELS, SERIAL_LEVELS, CassandraSettings, TlsSettings
from states.cassandra.shards import DEFAULT_SHARDS, MAX_SHARDS
from states.spec import check_identifier

_C, _T = CassandraSettings(), TlsSettings()


def _keyspace(name: str) -> str:
    check_identifier(name, "keyspace name")
    if name.startswith("system"):
        msg = f"keyspace {name!r} is Cassandra's own (system*): name the service's keyspace"
        raise ValueError(msg)
    return name


def _hosts(v: Any) -> Any:
    return [h.strip() for h in v.split(",")] if isinstance(v, str) else v


#: What a new table gets while ``shards`` is unset, as the reference says it.
_NEW_TABLE_LAYOUT = f"{DEFAULT_SHARDS} shards" if DEFAULT_SHARDS else "a partition per key"

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
    consistency: choice(*sorted(CONSISTENCY_LEVELS), upper=True) = Field(  # type: ignore[valid-type]
        default=_C.consistency, description=(
            "reads, plain writes and the commit phase of LWTs; a level below a majority of the keyspace's replicas "
            "is refused (see `accept_weak_consistency`), `ANY` always"))
    serial_consistency: choice(*sorted(SERIAL_LEVELS), upper=True) = Field(  # type: ignore[valid-type]
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
    replication: Annotated[dict[str, Scalar], none_is_empty(dict)] = Field(default=dict(_C.replication), description=(
        "the keyspace's replication, when `create_keyspace` creates it"))
    shards: Annotated[Int, Field(ge=0, le=MAX_SHARDS)] | None = Field(default=_C.shards, description=(
        "unset: each state table is used with the layout it was created with, and a new one gets "
        f"{_NEW_TABLE_LAYOUT}. 0: a partition per key. N: state tables keep their keys in N partitions "
        "(`PRIMARY KEY ((shard), key)`), so a commit is one conditional batch per shard instead of one LWT per key "
        "(several times cheaper for Cassandra); about one shard per million keys. Fixed per table when it is "
        "created: a number that differs from an existing table's is refused (`python -m app migrate` copies a "
        "table to another layout). On Cassandra 5.0 a sharded table is created with a storage-attached index on "
        "its key columns, so cqlsh reads a key without its shard (`SELECT word, count FROM trident.word_counts "
        "WHERE word = 'the'`); on 4.x list every shard (see [operations.md](operations.md), \"Reading results\"). "
        'See [design.md](design.md), "Sharded tables"'))

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
