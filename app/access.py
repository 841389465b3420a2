"""Before Spark starts: do Kafka and Cassandra accept the service's principals at all?

A wrong password, an untrusted certificate, a source topic the principal may not see or a missing
Cassandra grant is told in seconds (exit 2, one line naming the server, the principal and the
setting) instead of after Spark's start-up: the tables are claimed here, which creates them (the
CREATE grant) and writes their owner (MODIFY). An outage is no verdict here: the pipelines ride it
out as they always do.
"""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Any

from app.config import ServiceConfig, compile_pipeline
from app.config.compile import spout_config
from app.failures import refusal
from app.metrics import Metrics
from spouts.errors import AccessRefusedError, SpoutError
from spouts.kafka.discovery import KafkaCoordinator

log = logging.getLogger(__name__)

#: The DataStax driver's loggers that log a failed connection with its traceback.
DRIVER_LOGGERS = ("cassandra.cluster", "cassandra.connection", "cassandra.pool")


class _ConnectionErrorWithoutTraceback(logging.Filter):
    """Folds the traceback of a connection error the driver logs (refused, untrusted, away) into its line:
    no bug to debug, and the service's own line says what to check."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and (isinstance(exc, OSError) or type(exc).__module__.startswith("cassandra")):
            record.msg, record.args = f"{record.getMessage()} {type(exc).__name__}: {' '.join(str(exc).split())}", ()
            record.exc_info, record.exc_text = None, None
        return True


_FOLD = _ConnectionErrorWithoutTraceback()


def fold_driver_tracebacks() -> None:
    """Install the filter that keeps the driver's log of a failed connection to one line each (idempotent)."""
    for name in DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        if _FOLD not in logger.filters:
            logger.addFilter(_FOLD)


def check_access(config: ServiceConfig, metrics: Metrics) -> None:
    """Raise the first refusal met: Kafka's as :class:`AccessRefusedError`, Cassandra's as the driver raised it."""
    fold_driver_tracebacks()
    for p in config.pipelines:
        coordinator = KafkaCoordinator(spout_config(config, p), p.id)
        try:
            coordinator.refresh()
        except AccessRefusedError:
            raise
        except SpoutError as e:  # away, or no topic yet: the pipeline reports it as degraded
            log.info("pipeline %s: Kafka not checked before start: %s", p.id, e)
        finally:
            coordinator.close()
    cassandra = config.cassandra_settings()
    if cassandra is not None and any(p.state.backend == "cassandra" for p in config.pipelines):
        from states.cassandra.session import shared_client

        try:
            shared_client(cassandra)  # connected once: the later claims reuse the session
            for p in config.pipelines:  # claimed again (a no-op) when the pipelines start
                compile_pipeline(config, p, metrics=metrics).claim_tables()
        except Exception as e:
            if refusal(e) is not None:
                raise
            untrusted = cassandra_tls_refusal(cassandra)
            if untrusted is not None:
                raise untrusted from e
            log.info("Cassandra not checked before start: %s", e)


def cassandra_tls_refusal(settings: Any) -> Exception | None:
    """The TLS error of a handshake with each contact point, as a ``NoHostAvailable`` of typed ``ssl`` errors;
    None when TLS is off or a handshake succeeds or fails otherwise.

    The DataStax driver reports a failed handshake as a plain ``OSError`` whose text quotes the SSL error,
    so a failed connection is asked again here, with the same TLS context, to get the error's type.
    """
    if settings is None or not settings.tls.enabled:
        return None
    from cassandra.cluster import NoHostAvailable

    from states.cassandra.session import ssl_context

    ctx = ssl_context(settings.tls)
    assert ctx is not None
    errors: dict[str, BaseException] = {}
    for host in settings.contact_points:
        try:
            with socket.create_connection((host, settings.port), timeout=settings.connect_timeout_s) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host if ctx.check_hostname else None):
                return None
        except ssl.SSLError as e:
            errors[f"{host}:{settings.port}"] = e
        except OSError:
            return None  # away, not refused
    return NoHostAvailable("TLS handshake refused", errors) if errors else None
