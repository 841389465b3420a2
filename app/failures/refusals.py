"""Refusals recognised by type: a server said no to the service's credentials, rights or certificate, for good.

Kafka's are typed where they are seen (:mod:`spouts.kafka.access`: :class:`~spouts.errors.AccessRefusedError`,
or a ``KafkaException`` carrying a refusal code); Cassandra's by the driver's classes
(:mod:`states.cassandra.refusals`). :func:`refusal` looks through an error and what it wraps and
tells the first refusal it meets in one line naming the server, the principal and the setting to check.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException

from app.failures.causes import chain
from spouts.errors import AccessRefusedError
from spouts.kafka.access import REFUSALS


@dataclass(frozen=True, slots=True)
class Refusal:
    """A server refused the service for good: ``kind`` is authentication, authorization or TLS; ``line`` names
    the server, the principal and the setting to check, on one line without secrets."""

    kind: str
    line: str

    @property
    def cause(self) -> str:
        """The kind as a failure cause (a metric label: lower case)."""
        return self.kind.lower()


def refusal(e: BaseException, *, cassandra_role: str | None = None) -> Refusal | None:
    """The refusal ``e`` is or wraps, by type: Kafka's (:class:`~spouts.errors.AccessRefusedError`, or a
    ``KafkaException`` whose code is one), the Cassandra driver's (:func:`states.cassandra.refusals.refused`);
    None when it is none of them. ``cassandra_role``: the configured user, named in the line."""
    # imported here: the driver loads in a second, and only a failure needs it
    from states.cassandra.refusals import refused

    for err in chain(e):
        if isinstance(err, AccessRefusedError):
            return Refusal(err.kind, str(err))
        kafka = kafka_error(err)
        kind = None if kafka is None else REFUSALS.get(kafka.code())
        if kafka is not None and kind is not None:
            return Refusal(kind, f"{kind} refused by Kafka: {' '.join(kafka.str().split())}")
        cassandra = refused(err, cassandra_role)
        if cassandra is not None:
            return Refusal(cassandra.kind, cassandra.line)
    return None


def kafka_error(err: BaseException) -> KafkaError | None:
    """The ``KafkaError`` a ``KafkaException`` carries (None for any other error, or one that carries none)."""
    if not isinstance(err, KafkaException) or not err.args:
        return None
    arg = err.args[0]
    return arg if isinstance(arg, KafkaError) else None
