"""Whether a pipeline's Kafka answers now, asked every few seconds by a thread of its own.

A txid reading from a broker that went away waits up to ``kafka.read_timeout_s`` (and its retries)
before it fails, and until then the coordinator has nothing to report: ``/readyz`` would say ``active``
through the first minute of an outage. This watch asks the cluster for its metadata on its own
connection; while no broker answers, the pipeline is ``degraded`` with the reason and since when.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from app.service.watch import Watch
from spouts.kafka.access import watched
from spouts.kafka.config import KafkaSpoutConfig

log = logging.getLogger(__name__)

INTERVAL_S = 5.0  # how often the cluster is asked
TIMEOUT_S = 5.0  # the longest a metadata request may take (less when kafka.request_timeout_s is shorter)


class KafkaWatch(Watch):
    """``problem`` (None while Kafka answers) and ``since`` (wall-clock seconds) for one pipeline."""

    def __init__(self, config: KafkaSpoutConfig, topology_id: str, *, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(f"kafka-watch-{topology_id}", interval_s)
        self.config, self.topology_id, self._clock = config, topology_id, clock
        self.timeout_s = min(TIMEOUT_S, config.request_timeout_s)
        self.problem: str | None = None
        self.since: float | None = None
        self._consumer: Any = None

    def look(self) -> None:
        self.check()

    def check(self) -> None:
        """Ask once; set or clear :attr:`problem`."""
        from confluent_kafka import Consumer, KafkaError, KafkaException

        try:
            if self._consumer is None:
                conf, _ = watched(self.config.consumer_config(self.topology_id, role="plan"))
                self._consumer = Consumer(conf)
            self._consumer.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            reason = err.str() if isinstance(err, KafkaError) else str(e)
            self._down(f"Kafka at {self.config.bootstrap_servers} does not answer: {reason}")
            return
        if self.problem is not None:
            log.info("pipeline %s: Kafka answers again (down since %s)", self.topology_id,
                     time.strftime("%H:%M:%S", time.localtime(self.since or 0)))
        self.problem, self.since = None, None

    def _down(self, problem: str) -> None:
        if self.problem is None:
            self.since = self._clock()
            log.warning("pipeline %s: %s", self.topology_id, problem)
        self.problem = problem

    def failed(self, error: Exception) -> None:
        log.debug("pipeline %s: the Kafka watch could not ask: %s", self.topology_id, error)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
