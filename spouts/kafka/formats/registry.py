"""Schema Registry settings, and the registry client each process opens once per settings.

The client is confluent-kafka's ``SchemaRegistryClient`` (REST, its own schema cache). Secrets
(the basic-auth password, the TLS key's password) never appear in a repr.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

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
                raise ValueError(f"schema registry url {url.strip()!r} must start with http:// or https://")
        if (self.username is None) != (self.password is None):
            raise ValueError("schema registry basic auth needs both username and password")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("schema registry TLS client authentication needs both cert_file and key_file")
        if self.timeout_s <= 0:
            raise ValueError("schema registry timeout_s must be > 0")

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
