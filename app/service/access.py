"""Before Spark starts: do Kafka and Cassandra accept the service's principals at all?

A wrong password, an untrusted certificate, a source topic the principal may not see or a missing
Cassandra grant is told in seconds (exit 2, one line naming the server, the principal and the
setting) instead of after Spark's start-up: the tables are claimed here, which creates them (the
CREATE grant) and writes their owner (MODIFY). So are a ``cassandra.local_dc`` the cluster does not
have (with the data centres it reports), a keyspace that does not exist while ``create_keyspace`` is
false, a ``consistency``/``serial_consistency`` pair that loses exactly-once on the keyspace's
replication (unless ``accept_weak_consistency``: then one warning), and a SQLite path that cannot be
created. A Kafka outage is no verdict here: the pipelines ride it out. Cassandra away is waited for
here, before Spark, under the pipelines' ``outage_limit_s``.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.config import ServiceConfig, compile_pipeline
from app.config.compile import spout_config
from app.failures.error_text import describe
from app.failures.policy import BAD_INPUT, FAILED
from app.failures.refusals import refusal
from app.metrics import Metrics
from spouts.errors import AccessRefusedError, SpoutError
from spouts.kafka.discovery import KafkaCoordinator

log = logging.getLogger(__name__)

#: The longest wait between two attempts to reach Cassandra before Spark starts.
RETRY_MAX_S = 30.0


class StartupError(Exception):
    """The service cannot start: one line naming the setting or object at fault, and the exit code it asks for
    (2 for a setting, 1 for an outage that outlasted ``outage_limit_s``)."""

    def __init__(self, message: str, exit_code: int = BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: The DataStax driver's loggers that log a failed connection with its traceback.
DRIVER_LOGGERS = ("cassandra.cluster", "cassandra.connection", "cassandra.pool")


class _ConnectionErrorWithoutTraceback(logging.Filter):
    """Folds the traceback of a connection error the driver logs (refused, untrusted, away) into its line:
    no bug to debug, and the service's own line says what to check."""

    def filter(self, record: logging.LogRecord) -> bool:
        from states.cassandra.refusals import DRIVER_ERRORS  # loaded already: these are the driver's loggers

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, (OSError, *DRIVER_ERRORS)):
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


def check_access(config: ServiceConfig, metrics: Metrics, stop: threading.Event | None = None) -> None:
    """Raise the first refusal met: Kafka's as :class:`AccessRefusedError`, Cassandra's as the driver raised it;
    a setting the servers or the machine contradict as :class:`StartupError`. Returns early when ``stop`` is set."""
    fold_driver_tracebacks()
    _check_kafka(config)
    _check_sqlite_paths(config)
    cassandra = config.cassandra_settings()
    if cassandra is not None and any(p.state.backend == "cassandra" for p in config.pipelines):
        client = _connect(config, cassandra, stop)
        if client is None:
            return  # stopped while waiting
        keyspaces = client.cluster.metadata.keyspaces
        if not cassandra.create_keyspace and cassandra.keyspace not in keyspaces:
            msg = (
                f"cassandra.keyspace: keyspace {cassandra.keyspace!r} does not exist on the cluster and "
                "cassandra.create_keyspace is false: create it (CREATE KEYSPACE ... WITH replication "
                "= ...) or set create_keyspace: true"
            )
            raise StartupError(msg)
        check_consistency(cassandra, client)
        for p in config.pipelines:  # claimed again (a no-op) when the pipelines start
            compile_pipeline(config, p, metrics=metrics).claim_tables()


def check_consistency(settings: Any, client: Any) -> None:
    """Raise :class:`StartupError` when ``consistency`` and ``serial_consistency`` lose exactly-once on the keyspace's
    replication as the cluster has it (as ``replication`` will create it when the keyspace does not exist yet);
    with ``accept_weak_consistency`` log one warning saying what is lost instead. ``validate`` judged the config's
    ``replication``; a keyspace created otherwise, or since, is only known here."""
    from app.config.schema.cassandra import consistency_refusal
    from states.cassandra.guarantees import consistency_gap, live_replication

    keyspace = client.cluster.metadata.keyspaces.get(settings.keyspace)
    if keyspace is not None:
        replication: Any = live_replication(keyspace.replication_strategy)
        source = f"keyspace {settings.keyspace} on the cluster"
    else:  # created from the settings by the first claim below
        replication, source = settings.replication, "from cassandra.replication"
    gap = consistency_gap(settings.consistency, settings.serial_consistency, replication,
                          settings.local_dc or driver_local_dc(client), source)
    if gap is None:
        return
    if gap.waivable and settings.accept_weak_consistency:
        log.warning("cassandra.accept_weak_consistency is true, so exactly-once is not guaranteed: "
                    "cassandra.%s: %s", gap.setting, gap.reason)
        return
    msg = f"cassandra.{gap.setting}: {consistency_refusal(gap)}"
    raise StartupError(msg)


def driver_local_dc(client: Any) -> str | None:
    """The data centre the driver routes to (the contact point's when ``local_dc`` is unset); None if not known."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT

    policy = client.cluster.profile_manager.profiles[EXEC_PROFILE_DEFAULT].load_balancing_policy
    while policy is not None and getattr(policy, "local_dc", None) is None:  # down the wrappers to DCAware...
        policy = getattr(policy, "_child_policy", None)
    dc = getattr(policy, "local_dc", None)
    return dc if isinstance(dc, str) and dc else None


def _check_kafka(config: ServiceConfig) -> None:
    """Raise :class:`AccessRefusedError` when Kafka refuses a pipeline's client; a Kafka away is only logged."""
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


def _check_sqlite_paths(config: ServiceConfig) -> None:
    """Raise :class:`StartupError` for a SQLite state file this machine cannot hold."""
    for i, p in enumerate(config.pipelines):
        if p.state.backend == "sqlite":
            problem = sqlite_path_problem(p.state.sqlite_path)
            if problem is not None:
                msg = f"pipelines[{i}].state.sqlite_path: {problem}"
                raise StartupError(msg)


def _connect(config: ServiceConfig, settings: Any, stop: threading.Event | None) -> Any:
    """This process's Cassandra client, waiting (one warning line per attempt) while no node answers.

    A refusal, an untrusted certificate or a wrong ``local_dc`` is raised at once; an outage longer than the
    pipelines' shortest ``outage_limit_s`` is a :class:`StartupError` with exit code 1. None when ``stop`` is set.
    """
    from cassandra import OperationTimedOut
    from cassandra.cluster import NoHostAvailable

    from states.cassandra.session import shared_client

    limits = [p.outage_limit_s for p in config.pipelines if p.state.backend == "cassandra"]
    limit = None if any(x is None for x in limits) else min(x for x in limits if x is not None)
    began, attempt = time.monotonic(), 0
    where = ",".join(f"{h}:{settings.port}" for h in settings.contact_points)
    driver = logging.getLogger("cassandra.cluster")
    while True:
        level = driver.level
        driver.setLevel(logging.CRITICAL)  # its lines of a failed attempt: the warning below says it once
        try:
            return shared_client(settings)  # connected once: the later claims reuse the session
        except Exception as e:
            if refusal(e) is not None:
                raise
            untrusted = cassandra_tls_refusal(settings)
            if untrusted is not None:
                raise untrusted from e
            if not isinstance(e, NoHostAvailable | OperationTimedOut | OSError):
                raise
            wrong = wrong_local_dc(settings)
            if wrong is not None:
                raise StartupError(wrong) from None
            waited = time.monotonic() - began
            if limit is not None and waited >= limit:
                msg = (
                    f"Cassandra at {where} did not answer for {waited:.0f} s (outage_limit_s "
                    f"{limit:.0f}): {describe(e)}"
                )
                raise StartupError(msg, FAILED) from None
            wait = min(RETRY_MAX_S, 2.0 ** attempt)
            log.warning("Cassandra at %s does not answer (%s): trying again in %.0f s; Spark starts once it does",
                        where, describe(e), wait)
            attempt += 1
            if stop is not None and stop.wait(wait):
                return None
            if stop is None:
                time.sleep(wait)
        finally:
            driver.setLevel(level)


def wrong_local_dc(settings: Any) -> str | None:
    """One line naming a ``cassandra.local_dc`` the cluster does not have and the data centres it reports;
    None when local_dc is unset, is one of them, or the cluster cannot be asked (connected without local_dc)."""
    if settings is None or settings.local_dc is None:
        return None
    from states.cassandra.session import CassandraClient

    try:
        client = CassandraClient(replace(settings, local_dc=None))
    except Exception:  # noqa: BLE001 - unreachable or refused: nothing to say about the data centre
        return None
    try:
        centres = sorted({h.datacenter for h in client.cluster.metadata.all_hosts() if h.datacenter})
    finally:
        client.close()
    if not centres or settings.local_dc in centres:
        return None
    return (f"cassandra.local_dc: {settings.local_dc!r} is not a data centre of this cluster (it reports: "
            f"{', '.join(centres)}); name one of them, or leave local_dc out to use the contact point's")


def sqlite_path_problem(path: str) -> str | None:
    """Why a SQLite state file cannot be created or opened at ``path`` (a directory, a regular file where a
    directory should be, no write permission), or None."""
    target = Path(path).absolute()
    if target.is_dir():
        return f"{path} is a directory, not a file"
    existing = next(a for a in target.parents if a.exists())  # the root exists
    if not existing.is_dir():
        return f"{existing} is a file, so {path} cannot be created under it"
    if not target.exists() and not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot create {path}: no write permission on {existing}"
    if target.exists() and not os.access(target, os.R_OK | os.W_OK):
        return f"cannot open {path}: no read and write permission"
    return None


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
    if ctx is None:  # only when TLS is off, handled above
        return None
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
