"""A Schema Registry test peer: the REST API subset confluent-kafka's client uses, in process, on loopback.

Subjects hold versions of schemas; a schema (its text, type and references) has one id across
subjects, as in Confluent's registry. Implemented: register (``POST /subjects/{s}/versions``),
look up (``POST /subjects/{s}``), ``GET /schemas/ids/{id}`` (and its ``/subjects``, ``/versions``),
``GET /subjects``, ``GET /subjects/{s}/versions`` and ``/versions/{v|latest}``, ``DELETE
/subjects/{s}``, ``POST /compatibility/subjects/{s}/versions/{v}``, and the compatibility levels:
``GET/PUT /config`` (global, BACKWARD unless set) and ``GET/PUT/DELETE /config/{s}`` (a subject's
own level, which overrides the global one; ``GET`` answers 40408 when it has none, unless
``defaultToGlobal=true``). A registration is checked at the subject's level (NONE, BACKWARD,
FORWARD, FULL and their _TRANSITIVE forms) and refused with 409 when incompatible: Avro schemas
by Apache Avro's schema-resolution checker (the reader/writer rules of Confluent's and Karapace's
Avro checks), JSON Schema by the subset of the registries' rules in :mod:`.json_compat`; Protobuf
schemas are NOT checked (always compatible here: a test evolving one must still make a change a
real registry accepts). Errors use the registry's codes
(40401 subject not found, 40402 version not found, 40403 schema not found, 40408 no subject
level, 409 incompatible, 42201 invalid schema, 42203 invalid level).

Schemas are served as registered (confluent-kafka's Protobuf serializer registers the serialized
form, base64). ``protobuf_versions_as_text=True`` answers like Karapace: a subject version of a
Protobuf schema in its ``.proto`` text even when asked ``format=serialized`` (``/schemas/ids/{id}``
still serves it as registered), rendered by :mod:`.proto_text`.

It listens on 127.0.0.1 in a thread of the test process, so Spark's Python workers reach it as any
client does. ``python -m tests.schemaregistry`` runs one in the foreground.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

from tests.schemaregistry import json_compat
from tests.schemaregistry.proto_text import proto_text

_JSON = "application/vnd.schemaregistry.v1+json"
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")


class RegistryError(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class Registry:
    """The registry's data: schemas by id, each subject's versions (ids in order), the compatibility levels."""

    schemas: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    compatibility: str = "BACKWARD"  # the global level
    subject_compatibility: dict[str, str] = field(default_factory=dict)
    protobuf_versions_as_text: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) served, for tests

    def register(self, subject: str, body: dict[str, Any]) -> int:
        schema = _normal(body)
        with self.lock:
            versions = self.subjects.get(subject, [])
            for sid in versions:
                if self.schemas[sid] == schema:
                    return sid
            level = self.level(subject)
            problems = self._problems(schema, [self.schemas[sid] for sid in versions], level)
            if problems:
                raise RegistryError(409, 409, f"Schema being registered is incompatible with an earlier schema for "
                                              f'subject "{subject}", details: {problems} (compatibility {level})')
            sid = next((i for i, s in self.schemas.items() if s == schema), len(self.schemas) + 1)
            self.schemas[sid] = schema
            self.subjects.setdefault(subject, []).append(sid)
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
        out = self._registered(subject, n, versions[n - 1])
        if self.protobuf_versions_as_text and out.get("schemaType") == "PROTOBUF":
            out["schema"] = proto_text(out["schema"])
        return out

    def compatible(self, subject: str, version: str, body: dict[str, Any]) -> bool:
        if subject not in self.subjects:
            return True
        level = self.level(subject)
        versions = self._versions(subject)
        against = versions if version == "latest" else [versions[int(version) - 1]]
        return not self._problems(_normal(body), [self.schemas[sid] for sid in against], level)

    def level(self, subject: str) -> str:
        """The subject's compatibility level: its own, else the global one."""
        return self.subject_compatibility.get(subject, self.compatibility)

    def set_level(self, subject: str | None, body: dict[str, Any]) -> dict[str, str]:
        level = str(body.get("compatibility", "")).upper()
        if level not in LEVELS:
            raise RegistryError(422, 42203, f"Invalid compatibility level {body.get('compatibility')!r}; valid levels "
                                            f"are {', '.join(LEVELS)}")
        if subject is None:
            self.compatibility = level
        else:
            self.subject_compatibility[subject] = level
        return {"compatibility": level}

    def subject_level(self, subject: str, default_to_global: bool) -> dict[str, str]:
        if subject in self.subject_compatibility or default_to_global:
            return {"compatibilityLevel": self.level(subject)}
        raise RegistryError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    def _versions(self, subject: str) -> list[int]:
        if subject not in self.subjects:
            raise RegistryError(404, 40401, f"Subject '{subject}' not found.")
        return self.subjects[subject]

    def _registered(self, subject: str, version: int, sid: int) -> dict[str, Any]:
        return {"subject": subject, "version": version, "id": sid, **_shown(self.schemas[sid])}

    def _problems(self, new: dict[str, Any], earlier: list[dict[str, Any]], level: str) -> list[str]:
        """Why ``new`` may not follow the ``earlier`` versions at ``level`` (none: it may)."""
        if level == "NONE" or not earlier:
            return []
        against = earlier if level.endswith("_TRANSITIVE") else earlier[-1:]
        problems = []
        for old in against:
            if level.startswith(("BACKWARD", "FULL")):
                problems += self._cannot_read(new, old)  # the new schema reads what the old one wrote
            if level.startswith(("FORWARD", "FULL")):
                problems += self._cannot_read(old, new)
        return problems

    def _cannot_read(self, reader: dict[str, Any], writer: dict[str, Any]) -> list[str]:
        """Why data ``writer`` wrote cannot be read with ``reader`` (Avro and JSON Schema; Protobuf: nothing)."""
        if reader["schemaType"] != writer["schemaType"]:
            return [f"a {reader['schemaType']} schema after a {writer['schemaType']} one"]
        if reader["schemaType"] == "JSON":
            return json_compat.problems(json.loads(reader["schema"]), json.loads(writer["schema"]))
        if reader["schemaType"] != "AVRO":
            return []
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        result = ReaderWriterCompatibilityChecker().get_compatibility(self._avro(reader), self._avro(writer))
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        kinds = sorted({kind.name for kind in result.incompatibilities})
        return [f"{'/'.join(kinds)} at {', '.join(sorted(result.locations))}: {'; '.join(sorted(result.messages))}"]

    def _avro(self, schema: dict[str, Any], names: Any = None) -> Any:
        """The parsed Avro schema, its references' named types first (from the subject versions they name)."""
        from avro.errors import SchemaParseException
        from avro.name import Names
        from avro.schema import make_avsc_object

        names = Names() if names is None else names
        for ref in schema["references"]:
            versions = self._versions(ref["subject"])
            self._avro(self.schemas[versions[int(ref["version"]) - 1]], names)
        try:
            return make_avsc_object(json.loads(schema["schema"]), names)
        except SchemaParseException as e:
            raise RegistryError(422, 42201, f"Invalid AVRO schema: {e}") from None


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
    if kind == "AVRO" and not body.get("references"):
        from avro.errors import SchemaParseException
        from avro.schema import parse

        try:
            parse(text)
        except SchemaParseException as e:
            raise RegistryError(422, 42201, f"Invalid AVRO schema: {e}") from None
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

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  the name the mirrored API uses
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
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
            case "GET", ["config"]:
                return {"compatibilityLevel": r.compatibility}
            case "PUT", ["config"]:
                return r.set_level(None, body)
            case "GET", ["config", subject]:
                return r.subject_level(subject, query.get("defaultToGlobal", ["false"])[0] == "true")
            case "PUT", ["config", subject]:
                return r.set_level(subject, body)
            case "DELETE", ["config", subject]:
                return {"compatibilityLevel": r.subject_compatibility.pop(subject, r.compatibility)}
            case "POST", ["compatibility", "subjects", subject, "versions", version]:
                return {"is_compatible": r.compatible(subject, version, body)}
        raise RegistryError(404, 404, f"{method} {'/'.join(parts)}: not implemented by the test registry")


class SchemaRegistryServer:
    """The test registry on ``127.0.0.1`` (``port`` 0: any free port); a context manager.
    ``protobuf_versions_as_text``: subject versions answer Protobuf schemas in ``.proto`` text, as Karapace does."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, protobuf_versions_as_text: bool = False) -> None:
        self.registry = Registry(protobuf_versions_as_text=protobuf_versions_as_text)
        handler = type("Handler", (_Handler,), {"registry": self.registry})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
