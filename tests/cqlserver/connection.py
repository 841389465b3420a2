"""One client connection: handshake, authentication, request dispatch, responses.

A reader thread decodes envelopes and handles handshake messages inline (the
v5 framing switch must happen between two reads); QUERY/PREPARE/EXECUTE/BATCH
run on the server's worker pool so a delayed request does not block others on
the same connection, as with Cassandra's stream multiplexing.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import TYPE_CHECKING, Any

from . import messages as m
from .engine import BatchItem, ExecOptions
from .errors import AuthenticationError, CqlError, ProtocolError, ServerError
from .faults import DROP_CONNECTION, WRITE_TIMEOUT, RequestInfo
from .framing import FLAG_CUSTOM_PAYLOAD, Envelope, EnvelopeDecoder, encode_envelope, encode_segments
from .results import Result, SchemaChange, SetKeyspace, encode_result
from .system_tables import is_system_keyspace
from .wire import Reader, Writer

if TYPE_CHECKING:  # pragma: no cover
    from .server import CqlServer

log = logging.getLogger(__name__)

PASSWORD_AUTHENTICATOR = "org.apache.cassandra.auth.PasswordAuthenticator"


class ClientConnection:
    def __init__(self, server: CqlServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.decoder = EnvelopeDecoder()
        self.version: int | None = None
        self.ready = False
        self.authenticated = server.username is None
        self.keyspace: str | None = None
        self.events: set[str] = set()
        self._write_lock = threading.Lock()
        self._segmented_out = False
        self.closed = False

    # -- I/O -------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.closed:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                self.decoder.feed(data)
                while not self.closed:
                    envelope = self.decoder.next_envelope()
                    if envelope is None:
                        break
                    self._on_envelope(envelope)
        except ProtocolError as exc:
            self._send_error(0, exc)
        except Exception:  # pragma: no cover - defensive: never kill the server
            log.exception("cqlserver connection failed")
        finally:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.server._forget(self)

    def send(self, stream: int, opcode: int, body: bytes) -> None:
        data = encode_envelope(self.version or 4, stream, opcode, body)
        with self._write_lock:
            if self._segmented_out:
                data = encode_segments(data)
            with contextlib.suppress(OSError):
                self.sock.sendall(data)

    def _send_error(self, stream: int, error: CqlError) -> None:
        self.send(stream, m.OP_ERROR, error.encode_body(self.version or 4))

    def push_schema_change(self, change: SchemaChange) -> None:
        if "SCHEMA_CHANGE" in self.events and not self.closed:
            self.send(-1, m.OP_EVENT, m.schema_change_event_body(change))

    # -- dispatch ------------------------------------------------------------
    def _on_envelope(self, env: Envelope) -> None:
        if self.version is None:
            if env.version not in self.server.protocol_versions:
                supported = ", ".join(f"{v}/v{v}" for v in sorted(self.server.protocol_versions))
                self.version = min(self.server.protocol_versions)
                self._send_error(env.stream, ProtocolError(
                    f"Invalid or unsupported protocol version ({env.version}); supported versions are ({supported})"))
                self.close()
                return
            self.version = env.version
        elif env.version != self.version:
            self._send_error(env.stream, ProtocolError(
                f"Invalid message version. Got {env.version} but previous messages on this connection had "
                f"version {self.version}"))
            return
        try:
            if env.opcode == m.OP_OPTIONS:
                self.server.stats_collector.control("OPTIONS")
                self.send(env.stream, m.OP_SUPPORTED,
                          m.supported_body(self.server.engine.node.cql_version, self.server.protocol_versions))
            elif env.opcode == m.OP_STARTUP:
                self._startup(env)
            elif env.opcode == m.OP_AUTH_RESPONSE:
                self._auth_response(env)
            elif env.opcode == m.OP_REGISTER:
                self.server.stats_collector.control("REGISTER")
                self._require_ready()
                self.events.update(Reader(env.body).string_list())
                self.send(env.stream, m.OP_READY, b"")
            elif env.opcode in (m.OP_QUERY, m.OP_PREPARE, m.OP_EXECUTE, m.OP_BATCH):
                self._require_ready()
                self.server.submit(self._handle_request, env)
            else:
                raise ProtocolError(f"Unknown or unexpected opcode 0x{env.opcode:02x}")
        except CqlError as exc:
            self._send_error(env.stream, exc)

    def _require_ready(self) -> None:
        if not self.ready:
            raise ProtocolError("Unexpected message, expecting STARTUP or OPTIONS")
        if not self.authenticated:
            raise ProtocolError("Unexpected message, expecting AUTH_RESPONSE")

    def _startup(self, env: Envelope) -> None:
        self.server.stats_collector.control("STARTUP")
        if self.ready:
            raise ProtocolError("Unexpected message STARTUP, the connection is already initialized")
        options = Reader(env.body).string_map()
        cql_version = options.get("CQL_VERSION")
        if cql_version is None:
            raise ProtocolError("CQL_VERSION is mandatory")
        if not cql_version.startswith("3."):
            raise ProtocolError(f"Unsupported CQL version {cql_version}")
        if options.get("COMPRESSION"):
            raise ProtocolError(f"Unknown compression algorithm: {options['COMPRESSION']}")
        self.ready = True
        if self.server.username is not None:
            self.send(env.stream, m.OP_AUTHENTICATE, Writer().string(PASSWORD_AUTHENTICATOR).getvalue())
        else:
            self.send(env.stream, m.OP_READY, b"")
        if self.version is not None and self.version >= 5:
            # v5: everything after READY/AUTHENTICATE travels in checksummed segments.
            self.decoder.enable_segments()
            self._segmented_out = True

    def _auth_response(self, env: Envelope) -> None:
        self.server.stats_collector.control("AUTH_RESPONSE")
        if not self.ready or self.server.username is None or self.authenticated:
            raise ProtocolError("Unexpected message AUTH_RESPONSE")
        token = Reader(env.body).bytes() or b""
        parts = token.split(b"\x00")
        user = parts[1].decode("utf-8", "replace") if len(parts) == 3 else ""
        password = parts[2].decode("utf-8", "replace") if len(parts) == 3 else ""
        if user != self.server.username or password != self.server.password:
            raise AuthenticationError(f"Provided username {user} and/or password are incorrect")
        self.authenticated = True
        self.send(env.stream, m.OP_AUTH_SUCCESS, Writer().bytes(None).getvalue())

    # -- requests ------------------------------------------------------------
    def _handle_request(self, env: Envelope) -> None:
        assert self.version is not None
        try:
            r = Reader(env.body)
            if env.flags & FLAG_CUSTOM_PAYLOAD:
                r.bytes_map()
            if env.opcode == m.OP_PREPARE:
                body = self._prepare(m.decode_prepare(r, self.version))
            elif env.opcode == m.OP_QUERY:
                body = self._query(m.decode_query(r, self.version))
            elif env.opcode == m.OP_EXECUTE:
                body = self._execute(m.decode_execute(r, self.version))
            else:
                body = self._batch(m.decode_batch(r, self.version))
            if body is not None:
                self.send(env.stream, m.OP_RESULT, body)
        except CqlError as exc:
            self._send_error(env.stream, exc)
        except Exception as exc:  # pragma: no cover - a server bug must still answer
            log.exception("cqlserver failed to execute a request")
            self._send_error(env.stream, ServerError(f"cqlserver internal error: {exc!r}"))

    def _prepare(self, req: m.PrepareRequest) -> bytes | None:
        engine = self.server.engine
        keyspace = req.keyspace or self.keyspace
        parsed = engine.parse(req.query)
        info = self._info("PREPARE", req.query, engine.describe(parsed, keyspace), "ONE", None)
        self.server.stats_collector.request(info)
        if not self._apply_faults(info):
            return None
        entry = engine.prepare(req.query, keyspace)
        return encode_result(entry.result, self.version or 4)

    def _query(self, req: m.QueryRequest) -> bytes | None:
        engine = self.server.engine
        p = req.params
        keyspace = p.keyspace or self.keyspace
        parsed = engine.parse(req.query)
        described = engine.describe(parsed, keyspace)
        info = self._info("QUERY", req.query, described, p.consistency, p.serial_consistency)
        return self._run(info, lambda: engine.execute(parsed, keyspace, p.values, _options(p), names=p.names),
                         p.skip_metadata, None, list(described.members))

    def _execute(self, req: m.ExecuteRequest) -> bytes | None:
        engine = self.server.engine
        entry = engine.lookup(req.prepared_id)
        p = req.params
        described = engine.describe(entry.parsed, entry.keyspace)
        info = self._info("EXECUTE", entry.query, described, p.consistency, p.serial_consistency)
        return self._run(info, lambda: engine.execute(entry.parsed, entry.keyspace, p.values, _options(p),
                                                      variables=entry.variables),
                         p.skip_metadata, req.result_metadata_id, list(described.members))

    def _batch(self, req: m.BatchRequest) -> bytes | None:
        engine = self.server.engine
        keyspace = req.keyspace or self.keyspace
        items: list[BatchItem] = []
        queries: list[str] = []
        member_tables: list[str] = []
        tables: dict[str, None] = {}
        conditional = False
        for entry in req.entries:
            if entry.prepared_id is not None:
                prepared = engine.lookup(entry.prepared_id)
                parsed, query, ks, variables = prepared.parsed, prepared.query, prepared.keyspace, prepared.variables
            else:
                assert entry.query is not None
                parsed, query, ks, variables = engine.parse(entry.query), entry.query, keyspace, None
            described = engine.describe(parsed, ks)
            conditional |= described.conditional
            member_tables.extend(described.members)
            tables.update(dict.fromkeys(described.tables))
            queries.append(query)
            items.append(BatchItem(parsed, entry.values, variables))
        system = bool(tables) and all(is_system_keyspace(t.split(".", 1)[0]) for t in tables)
        info = RequestInfo("BATCH", "batch", tuple(tables), conditional, "; ".join(queries),
                           req.consistency, req.serial_consistency, system)
        opts = ExecOptions(req.consistency, req.serial_consistency, timestamp=req.timestamp)
        return self._run(info, lambda: engine.execute_batch(items, req.batch_type, keyspace, opts),
                         False, None, member_tables)

    def _info(self, opcode: str, cql: str, described: Any, consistency: str, serial: str | None) -> RequestInfo:
        return RequestInfo(opcode, described.kind, described.tables, described.conditional, cql,
                           consistency, serial, described.system)

    def _apply_faults(self, info: RequestInfo, action: Any = None) -> bool:
        """Apply matching faults; return False when the request was answered or dropped."""
        decision = self.server.faults.decide(info)
        decision.wait()
        fault = decision.fault
        if fault is None:
            return True
        if fault.applied and action is not None and fault.effect in (WRITE_TIMEOUT, DROP_CONNECTION):
            action()  # the mutation happens; only the answer is lost
        if fault.effect == DROP_CONNECTION:
            self.close()
            return False
        raise fault.error(info)

    def _run(self, info: RequestInfo, action: Any, skip_metadata: bool, metadata_id: bytes | None,
             member_tables: list[str] | None = None) -> bytes | None:
        self.server.stats_collector.request(info, member_tables)
        if not self._apply_faults(info, action):
            return None
        result: Result = action()
        if isinstance(result, SetKeyspace):
            self.keyspace = result.keyspace
        return encode_result(result, self.version or 4, skip_metadata, metadata_id)


def _options(p: m.QueryParameters) -> ExecOptions:
    return ExecOptions(p.consistency, p.serial_consistency, p.page_size, p.paging_state, p.timestamp)
