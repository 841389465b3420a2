"""A Schema Registry test peer: the REST API subset confluent-kafka's client uses, in process, on loopback.

Subjects hold versions of schemas; a schema (its text, type and references) has one id across
subjects, as in Confluent's registry. Implemented: register (``POST /subjects/{s}/versions``),
look up (``POST /subjects/{s}``), ``GET /schemas/ids/{id}`` (and its ``/subjects``, ``/versions``),
``GET /subjects``, ``GET /subjects/{s}/versions`` and ``/versions/{v|latest}``, ``DELETE
/subjects/{s}``, ``GET/PUT /config``, and ``POST /compatibility/subjects/{s}/versions/{v}``: Avro
records are checked for BACKWARD compatibility (a field the new schema adds needs a default);
other types are declared compatible. Errors use the registry's codes (40401 subject not found,
40402 version not found, 40403 schema not found, 409 incompatible). ``format=serialized`` returns
a schema as registered (confluent-kafka's Protobuf serializer registers the serialized form).

It listens on 127.0.0.1 in a thread of the test process, so Spark's Python workers reach it as any
client does. ``python -m tests.schemaregistry`` runs one in the foreground.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

_JSON = "application/vnd.schemaregistry.v1+json"


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Registry:
    """The registry's data: schemas by id, and each subject's versions (ids in order)."""

    schemas: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    compatibility: str = "BACKWARD"
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) served, for tests

    def register(self, subject: str, body: dict[str, Any]) -> int:
        schema = _normal(body)
        with self.lock:
            versions = self.subjects.setdefault(subject, [])
            for sid in versions:
                if self.schemas[sid] == schema:
                    return sid
            if versions and not self._compatible(schema, self.schemas[versions[-1]]):
                raise RegistryError(409, 409, f"Schema being registered is incompatible with an earlier schema "
                                              f"for subject {subject!r}")
            sid = next((i for i, s in self.schemas.items() if s == schema), len(self.schemas) + 1)
            self.schemas[sid] = schema
            versions.append(sid)
            return sid

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = _normal(body)
        for version, sid in enumerate(self._versions(subject), 1):
            if self.schemas[sid] == schema:
                return self._registered(subject, version, sid)
        raise RegistryError(404, 40403, "Schema not found")

    def by_id(self, sid: int) -> dict[str, Any]:
        if sid not in self.schemas:
            raise RegistryError(404, 40403, "Schema not found")
        return _shown(self.schemas[sid])

    def version(self, subject: str, version: str) -> dict[str, Any]:
        versions = self._versions(subject)
        n = len(versions) if version in ("latest", "-1") else int(version)
        if not 1 <= n <= len(versions):
            raise RegistryError(404, 40402, f"Version {version} not found.")
        return self._registered(subject, n, versions[n - 1])

    def compatible(self, subject: str, version: str, body: dict[str, Any]) -> bool:
        if subject not in self.subjects:
            return True
        against = self.schemas[self._versions(subject)[-1 if version == "latest" else int(version) - 1]]
        return self._compatible(_normal(body), against)

    def _versions(self, subject: str) -> list[int]:
        if subject not in self.subjects:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        return self.subjects[subject]

    def _registered(self, subject: str, version: int, sid: int) -> dict[str, Any]:
        return {"subject": subject, "version": version, "id": sid, **_shown(self.schemas[sid])}

    def _compatible(self, new: dict[str, Any], old: dict[str, Any]) -> bool:
        """BACKWARD for Avro records: every field of ``new`` that ``old`` lacks has a default."""
        if self.compatibility == "NONE" or new["schemaType"] != "AVRO" or old["schemaType"] != "AVRO":
            return True
        try:
            n, o = json.loads(new["schema"]), json.loads(old["schema"])
        except ValueError:
            return False
        if not (isinstance(n, dict) and isinstance(o, dict) and n.get("type") == o.get("type") == "record"):
            return n == o or not isinstance(n, dict)
        before = {f["name"] for f in o.get("fields", [])}
        return all(f["name"] in before or "default" in f for f in n.get("fields", []))


def _normal(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body.get("schema"), str):
        raise RegistryError(422, 42201, "Invalid schema: no schema text")
    kind = body.get("schemaType") or "AVRO"
    text = body["schema"]
    if kind in ("AVRO", "JSON"):
        try:
            text = json.dumps(json.loads(text), separators=(",", ":"))
        except ValueError as e:
            raise RegistryError(422, 42201, f"Invalid schema: {e}") from None
    return {"schema": text, "schemaType": kind, "references": body.get("references") or []}


def _shown(schema: dict[str, Any]) -> dict[str, Any]:
    out = {"schema": schema["schema"]}
    if schema["schemaType"] != "AVRO":
        out["schemaType"] = schema["schemaType"]
    if schema["references"]:
        out["references"] = schema["references"]
    return out


class _Handler(BaseHTTPRequestHandler):
    registry: Registry  # set on the subclass each server makes
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
            self.registry.requests.append((method, url.path))
            status, out = 200, self._route(method, [unquote(p) for p in url.path.strip("/").split("/")],
                                           parse_qs(url.query), body)
        except RegistryError as e:
            status, out = e.status, {"error_code": e.code, "message": e.message}
        except (ValueError, KeyError, IndexError) as e:
            status, out = 422, {"error_code": 42200, "message": f"{type(e).__name__}: {e}"}
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", _JSON)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str, parts: list[str], query: dict[str, list[str]], body: Any) -> Any:
        r = self.registry
        match method, parts:
            case "GET", ["schemas", "ids", sid]:
                return r.by_id(int(sid))
            case "GET", ["schemas", "ids", sid, "subjects"]:
                return [s for s, ids in r.subjects.items() if int(sid) in ids]
            case "GET", ["schemas", "ids", sid, "versions"]:
                return [{"subject": s, "version": ids.index(int(sid)) + 1} for s, ids in r.subjects.items()
                        if int(sid) in ids]
            case "GET", ["schemas", "types"]:
                return ["AVRO", "JSON", "PROTOBUF"]
            case "GET", ["subjects"]:
                return sorted(r.subjects)
            case "POST", ["subjects", subject, "versions"]:
                return {"id": r.register(subject, body)}
            case "POST", ["subjects", subject]:
                return r.lookup(subject, body)
            case "GET", ["subjects", subject, "versions"]:
                return list(range(1, len(r._versions(subject)) + 1))
            case "GET", ["subjects", subject, "versions", version]:
                return r.version(subject, version)
            case "DELETE", ["subjects", subject]:
                versions = r._versions(subject)
                del r.subjects[subject]
                return list(range(1, len(versions) + 1))
            case "GET", ["config"] | ["config", _]:
                return {"compatibilityLevel": r.compatibility}
            case "PUT", ["config"]:
                r.compatibility = body["compatibility"]
                return {"compatibility": r.compatibility}
            case "POST", ["compatibility", "subjects", subject, "versions", version]:
                return {"is_compatible": r.compatible(subject, version, body)}
        raise RegistryError(404, 404, f"{method} {'/'.join(parts)}: not implemented by the test registry")



class SchemaRegistryServer:
    """The test registry on ``127.0.0.1`` (``port`` 0: any free port); a context manager."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry = Registry()
        handler = type("Handler", (_Handler,), {"registry": self.registry})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SchemaRegistryServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
