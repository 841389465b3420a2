"""Schema Registry settings, and the registry client each process opens once per settings.

The client is confluent-kafka's ``SchemaRegistryClient`` (REST, its own schema cache). Secrets
(the basic-auth password, the TLS key's password) never appear in a repr.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from spouts.kafka.formats.spec import Failure

_CLIENTS: dict[RegistrySettings, Any] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True, repr=False)
class RegistrySettings:
    """Where the Schema Registry is and how to reach it: ``url`` (comma-separated for several),
    HTTP basic auth, TLS (a CA file, a client certificate and key), a request timeout."""

    url: str
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = None
    verify: bool = True
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        for url in self.url.split(","):
            if not url.strip().startswith(("http://", "https://")):
                msg = f"schema registry url {url.strip()!r} must start with http:// or https://"
                raise ValueError(msg)
        if (self.username is None) != (self.password is None):
            msg = "schema registry basic auth needs both username and password"
            raise ValueError(msg)
        if (self.cert_file is None) != (self.key_file is None):
            msg = "schema registry TLS client authentication needs both cert_file and key_file"
            raise ValueError(msg)
        if self.timeout_s <= 0:
            msg = "schema registry timeout_s must be > 0"
            raise ValueError(msg)

    def client_config(self) -> dict[str, Any]:
        """The ``SchemaRegistryClient`` configuration."""
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s}
        if self.username is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password}"
        if not self.verify:
            conf["ssl.ca.location"] = False
        elif self.ca_file:
            conf["ssl.ca.location"] = self.ca_file
        if self.cert_file:
            conf["ssl.certificate.location"] = self.cert_file
            conf["ssl.key.location"] = self.key_file
        if self.key_password:
            conf["ssl.key.password"] = self.key_password
        return conf

    def client(self) -> Any:
        """This process's client for these settings (created on first use, then shared)."""
        with _LOCK:
            client = _CLIENTS.get(self)
            if client is None:
                from confluent_kafka.schema_registry import SchemaRegistryClient

                client = _CLIENTS[self] = SchemaRegistryClient(self.client_config())
            return client

    def __repr__(self) -> str:
        auth = f", username={self.username!r}, password='***'" if self.username else ""
        return f"RegistrySettings(url={self.url!r}{auth}, ca_file={self.ca_file!r}, cert_file={self.cert_file!r})"


def reader_schema(settings: RegistrySettings, subject: str, schema_id: int | None, version: int | None,
                  schema_type: str, *, fmt: str | None = None) -> Any:
    """The schema records are read as (a registry ``Schema``): by id, by version, else the subject's latest.

    A schema in another ``fmt`` than the registry's default text (Protobuf's ``serialized``) is always
    fetched by id, a version first resolved to its id: Confluent's registry serves that form at both
    endpoints, Karapace only at ``/schemas/ids/{id}`` (its subject versions answer the text form).
    ValueError when the registry has no such schema or it is of another type; connection errors raise as they are.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient(settings.client_config())  # its own: a shared client caches "latest"
    what = f"schema id {schema_id}" if schema_id is not None else \
        f"version {version} of subject {subject!r}" if version is not None else f"schema under subject {subject!r}"
    try:
        if schema_id is None and fmt is not None:
            registered = client.get_version(subject, version) if version is not None else \
                client.get_latest_version(subject)
            schema_id = registered.schema_id
            client = SchemaRegistryClient(settings.client_config())  # nothing cached: the id's own answer in ``fmt``
        if schema_id is not None:
            schema = client.get_schema(schema_id, fmt=fmt)
        elif version is not None:
            schema = client.get_version(subject, version).schema
        else:
            schema = client.get_latest_version(subject).schema
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            msg = f"the schema registry has no {what}: {e.error_message}"
            raise ValueError(msg) from None
        raise
    if (schema.schema_type or "AVRO") != schema_type:
        msg = f"{what} is a {schema.schema_type or 'AVRO'} schema, not {schema_type}"
        raise ValueError(msg)
    return schema


def framing(values: Any, settings: RegistrySettings) -> tuple[Any, dict[int, Failure]]:
    """The 4 schema-id bytes of each value (a binary array, null where there are none) and the values that are bad:
    no Confluent framing (magic byte 0 and a 4-byte id: ``wire_format``) or an id the registry does not
    know (``schema_unknown``). Arrow compute over the batch; each distinct id is asked of the registry once."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    framed = pc.fill_null(pc.and_(pc.greater(pc.binary_length(values), 5),
                                  pc.equal(pc.binary_slice(values, 0, 1), pa.scalar(b"\x00", pa.binary()))), False)
    unframed = pc.and_(pc.is_valid(values), pc.invert(framed))
    bad = {i: Failure("wire_format", "no Confluent framing (magic byte 0, a 4-byte schema id, a payload)")
           for i in pc.indices_nonzero(unframed).to_pylist()}
    raw_ids = pc.if_else(framed, pc.binary_slice(values, 1, 5), pa.scalar(None, pa.binary()))
    known = {raw: int.from_bytes(raw, "big") for raw in pc.unique(raw_ids.drop_null()).to_pylist()}
    client = settings.client()
    for raw, schema_id in known.items():
        try:
            client.get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.http_status_code != 404:
                raise
            hit = pc.fill_null(pc.equal(raw_ids, pa.scalar(raw, pa.binary())), False)
            for i in pc.indices_nonzero(hit).to_pylist():
                bad[i] = Failure("schema_unknown", f"schema registry: {e.error_message} (id {schema_id})")
    return raw_ids, bad


def rows_to_array(rows: list[Any], arrow_type: Any, bad: dict[int, Failure], reason: str) -> Any:
    """The decoded rows as one Arrow array; a row Arrow cannot hold in ``arrow_type`` (a decimal wider than its
    precision) becomes a bad record (``reason``) instead of failing the batch. ``bad`` is updated."""
    import pyarrow as pa

    try:
        return pa.array(rows, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        first = e
    for i, row in enumerate(rows):
        if row is None:
            continue
        try:
            pa.array([row], arrow_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            bad[i] = Failure(reason, f"a value does not fit its column: {e}")
            rows[i] = None
    try:
        return pa.array(rows, arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        raise first from None
