"""What every command shares: exit codes, loading the config, finding a pipeline, progress lines."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the config models import pydantic, sqlglot and the spouts: not for --help
    from app.config import ServiceConfig

OK = 0  # done (or nothing to do)
FAILED = 1  # the operation failed at run time (a fatal pipeline error, a demo mismatch, a cluster error)
BAD_INPUT = 2  # a bad config, bad arguments, an unknown pipeline/topic, or refused credentials/ACLs/certificates
REFUSED = 3  # refused on purpose: an unsafe topic change, a lease held by a service, a missing confirmation
PARTIAL = 4  # done as far as the cluster allows: part of it could not be read or changed (the output says which)

EXIT_CODES = f"""exit codes:
  {OK}  done (or nothing to do)
  {FAILED}  failed at run time (the message names the object)
  {BAD_INPUT}  bad config or arguments (the message names the field), or credentials, an ACL, a grant or a
     certificate a server refused (the message names the server, the principal and the setting)
  {REFUSED}  refused on purpose (unsafe change, lease held, confirmation missing)
  {PARTIAL}  partly done: the cluster could not answer part of it (the output says which)"""
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CommandError(Exception):
    """A command stops with ``code`` and a message that names the field or object at fault."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.code = code


def parser(sub: Any, name: str, summary: str, example: str) -> argparse.ArgumentParser:
    """A subcommand parser whose ``--help`` shows an example and the exit codes."""
    made: argparse.ArgumentParser = sub.add_parser(name, help=summary, description=summary,
                                                   epilog=f"example:\n  {example}\n\n{EXIT_CODES}",
                                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    return made


def add_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, metavar="FILE", help="the YAML config file")


def load_config(path: str) -> ServiceConfig:
    from app.config import ConfigError, load

    try:
        return load(path)
    except ConfigError as e:
        msg = f"config error in {path}: {e}"
        raise CommandError(msg, BAD_INPUT) from None


def pipeline_of(config: ServiceConfig, pipeline_id: str) -> Any:
    try:
        return config.pipeline(pipeline_id)
    except KeyError:
        known = ", ".join(p.id for p in config.pipelines)
        msg = f"--pipeline {pipeline_id!r}: no such pipeline in the config (known: {known})"
        raise CommandError(msg,
                           BAD_INPUT) from None


def progress(message: str) -> None:
    """One progress line on stderr (stdout stays the command's result, for pipes)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def compile_all(config: ServiceConfig, path: str) -> list[Any]:
    """Every pipeline compiled (a ConfigError from compiling is a config error too)."""
    from app.config import ConfigError, compile_pipeline

    try:
        return [compile_pipeline(config, p) for p in config.pipelines]
    except ConfigError as e:
        msg = f"config error in {path}: {e}"
        raise CommandError(msg, BAD_INPUT) from None
