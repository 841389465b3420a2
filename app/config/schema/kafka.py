"""The ``kafka:`` section (with its ``schema_registry:``) and a topic's settings in ``topics:``."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    SecretStr,
    model_validator,
)

from app.config.runtime import build
from app.config.schema.fields import Bool, Int, Positive, Scalar, Section, Text, at, choice, none_is_empty
from spouts.kafka.formats import RegistrySettings

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
    properties: Annotated[dict[str, Scalar], none_is_empty(dict)] = Field(default_factory=dict, description=(
        "librdkafka properties passed through (SASL, TLS, timeouts, `client.id`, ...), checked by librdkafka itself "
        "at `validate`. Values are strings; booleans become `true`/`false`. The spout sets `bootstrap.servers`, "
        "`group.id`, `isolation.level`, `enable.auto.commit`, `enable.auto.offset.store`, `enable.partition.eof` "
        "and `auto.offset.reset` itself: naming them is an error. With `security.protocol: SASL_*` and mechanism "
        "`PLAIN`/`SCRAM-*`, `sasl.password` is required (from `TRIDENT_KAFKA_SASL_PASSWORD`)"))
    isolation_level: choice("read_committed", "read_uncommitted") = Field(  # type: ignore[valid-type]
        default="read_committed", description="`read_uncommitted` also reads records of aborted and open "
                                              "transactions")
    request_timeout_s: Positive = Field(default=10.0, description="bounds a watermark/timestamp query while "
                                                                  "planning a txid")
    read_timeout_s: Positive = Field(default=30.0, description="how long reading a planned range may make no "
                                                               "progress before the partition counts as unavailable")
    reader: choice("auto", "native", "python") = Field(  # type: ignore[valid-type]
        default="auto", description=(
            "how Spark's read tasks read a range: `native` copies librdkafka's records into Arrow buffers in C (about "
            "0.4 CPU-µs less per record; built by `make venv` and in the image), `python` builds them from "
            "confluent-kafka's messages, `auto` is `native` where it is built (else a warning and `python`). A read "
            "of the `headers` column always takes `python`. Each pipeline logs at start-up which one its reads "
            "take, and why not the native reader"))
    schema_registry: RegistryModel | None = Field(default=None, description=(
        "the Schema Registry of the `avro`, `protobuf` and `json_schema` formats: see "
        "[Record formats](#record-formats)"))


class TopicModel(Section):
    partitions: Annotated[Int, Field(ge=1)] = Field(description=(
        "`apply` adds partitions up to it and refuses fewer than the topic has"))
    replication_factor: Annotated[Int, Field(ge=1)] | None = Field(default=None, description=(
        "none: the broker default (on creation); `apply` refuses a value different from the topic's (that is a "
        "partition reassignment)"))
    configs: Annotated[dict[str, Scalar], none_is_empty(dict)] = Field(default_factory=dict, description=(
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
