"""The service's HTTP endpoints: ``/metrics`` (Prometheus), ``/healthz`` (alive), ``/readyz`` (working).

``/healthz`` answers 200 while the process serves and, given a liveness check, while that check
passes (else 503 with its JSON details: a hung coordinator, which a restart cures).

``/readyz`` answers 200 when every pipeline is ``active`` (holds its lease, not degraded, not
failed: :mod:`app.service.health`), else 503; its JSON body gives each pipeline's state, why and since when.
The server runs in a daemon thread; :meth:`HttpServer.close` stops it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

#: ``() -> (ready, details)``: details is a JSON-able mapping shown in /readyz's body (or /healthz's).
Readiness = Callable[[], tuple[bool, dict[str, Any]]]


class HttpServer:
    """Serves the three endpoints on ``host:port`` (port 0 picks a free one: see :attr:`port`)."""

    def __init__(self, host: str, port: int, readiness: Readiness,
                 registry: CollectorRegistry = REGISTRY, liveness: Readiness | None = None) -> None:
        handler = type("Handler", (_Handler,), {"readiness": staticmethod(readiness), "registry": registry,
                                                "liveness": staticmethod(liveness) if liveness else None})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> HttpServer:
        self._thread.start()
        log.info("serving /metrics, /healthz and /readyz on port %d", self.port)
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    readiness: Readiness
    liveness: Readiness | None
    registry: CollectorRegistry

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._reply(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            if self.liveness is None:
                self._reply(200, b"ok\n", "text/plain; charset=utf-8")
            else:
                self._check(self.liveness, "alive", failing_means=True)
        elif path == "/readyz":
            self._check(self.readiness, "ready", failing_means=False)
        else:
            self._reply(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain; charset=utf-8")

    def _check(self, check: Readiness, key: str, *, failing_means: bool) -> None:
        """200 or 503 with the check's JSON details; a check that raises counts as ``failing_means``
        (alive: a broken check must not restart the process; ready: it must not take traffic)."""
        try:
            ok, details = check()
        except Exception as e:  # noqa: BLE001 - a failing check is an answer, never a crash
            ok, details = failing_means, {"error": f"{type(e).__name__}: {e}"}
        body = json.dumps({key: ok, **details}, indent=1, default=str).encode() + b"\n"
        self._reply(200 if ok else 503, body, "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  the name BaseHTTPRequestHandler gives it
        log.debug("%s %s", self.address_string(), format % args)
