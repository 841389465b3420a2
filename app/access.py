"""Before Spark starts: do Kafka and Cassandra accept the service's principals at all?

A wrong password, an untrusted certificate, a source topic the principal may not see or a missing
Cassandra grant is told in seconds (exit 2, one line naming the server, the principal and the
setting) instead of after Spark's start-up: the tables are claimed here, which creates them (the
CREATE grant) and writes their owner (MODIFY). An outage is no verdict here: the pipelines ride it
out as they always do.
"""

from __future__ import annotations

import logging

from app.config import ServiceConfig, compile_pipeline
from app.config.compile import spout_config
from app.failures import refusal
from app.metrics import Metrics
from spouts.errors import AccessRefusedError, SpoutError
from spouts.kafka.discovery import KafkaCoordinator

log = logging.getLogger(__name__)

#: The DataStax driver's loggers that log a failed connection with its traceback.
DRIVER_LOGGERS = ("cassandra.cluster", "cassandra.connection", "cassandra.pool")


class _RefusalWithoutTraceback(logging.Filter):
    """Folds the traceback of a refusal the driver logs into one line: the service's own line names it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and refusal(exc) is not None:
            record.msg, record.args = f"{record.getMessage()} {type(exc).__name__}: {' '.join(str(exc).split())}", ()
            record.exc_info, record.exc_text = None, None
        return True


_FOLD = _RefusalWithoutTraceback()


def fold_driver_tracebacks() -> None:
    """Install the filter that keeps a refused connection's driver log lines to one line each (idempotent)."""
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
    if config.cassandra is not None and any(p.state.backend == "cassandra" for p in config.pipelines):
        from states.cassandra.session import shared_client

        try:
            shared_client(config.cassandra)  # connected once: the later claims reuse the session
            for p in config.pipelines:  # claimed again (a no-op) when the pipelines start
                compile_pipeline(config, p, metrics=metrics).claim_tables()
        except Exception as e:
            if refusal(e) is not None:
                raise
            log.info("Cassandra not checked before start: %s", e)
