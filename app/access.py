"""Before Spark starts: do Kafka and Cassandra accept the service's principals at all?

A wrong password, an untrusted certificate or a source topic the principal may not see is told in
seconds (exit 2, one line naming the server, the principal and the setting) instead of after
Spark's start-up. An outage is no verdict here: the pipelines ride it out as they always do, and a
missing Cassandra grant shows at the table claim that follows.
"""

from __future__ import annotations

import logging

from app.config import ServiceConfig
from app.config.compile import spout_config
from app.failures import refusal
from spouts.errors import AccessRefusedError, SpoutError
from spouts.kafka.discovery import KafkaCoordinator

log = logging.getLogger(__name__)


def check_access(config: ServiceConfig) -> None:
    """Raise the first refusal met: Kafka's as :class:`AccessRefusedError`, Cassandra's as the driver raised it."""
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
            shared_client(config.cassandra)  # connected once: the table claim reuses the session
        except Exception as e:
            if refusal(e) is not None:
                raise
            log.info("Cassandra not checked before start: %s", e)
