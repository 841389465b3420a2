"""Command line of the service: ``python -m app COMMAND --help`` describes each command.

    python -m app run --config FILE        run the pipelines of a config until SIGTERM/SIGINT
    python -m app validate --config FILE   check a config and print the plan it compiles to
    python -m app demo                     word count on Spark over an in-process Kafka, checked
    python -m app topics plan|apply ...    the declared Kafka topics against the cluster
    python -m app status --config FILE     where every pipeline stands, without the service running
    python -m app query --config FILE ...  read a pipeline's state table
    python -m app rewind --config FILE ... move where a pipeline's next txid starts reading
    python -m app audit --config FILE ...  recount committed ranges and compare the stored tables
    python -m app migrate --config FILE .. copy a pipeline's tables into another layout (shards)

Exit codes: 0 success; 1 a failed run, operation or demo mismatch (a server that cannot be reached
included); 2 a bad config or bad arguments, or credentials, grants or a certificate a server refused;
3 refused (unsafe change, lease held, confirmation missing); 4 partly done (the cluster could not
answer part of it). A server's error is one line on stderr, never a traceback; so is any other error
(``python -m app --debug COMMAND ...`` shows its traceback).
"""

from __future__ import annotations

import argparse
import sys

from app.commands import modules
from app.commands.common import BAD_INPUT, FAILED, CommandError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", dest="traceback", action="store_true",
                        help="an unexpected error's traceback instead of its one line (before the command)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in modules():
        module.add(sub)  # type: ignore[attr-defined]
    args = parser.parse_args(argv)
    from app.service.access import fold_driver_tracebacks

    fold_driver_tracebacks()  # a failed Cassandra connection: one line, not the driver's traceback
    try:
        return int(args.handler(args))
    except CommandError as e:
        print(f"{args.command}: {e}", file=sys.stderr)
        return e.code
    except Exception as e:
        from app.failures.error_text import describe
        from app.failures.refusals import refusal

        refused = refusal(e, cassandra_role=_cassandra_role(args))
        if refused is not None:
            print(f"{args.command}: {refused.line}", file=sys.stderr)
            return BAD_INPUT
        if _unreachable(e):
            line, code = _unreachable_line(args, e)
            print(f"{args.command}: {line}", file=sys.stderr)
            return code
        if args.traceback:
            raise  # a bug: its traceback is the report
        print(f"{args.command}: failed: {describe(e)} (python -m app --debug {args.command} ... shows where)",
              file=sys.stderr)
        return FAILED


def _unreachable_line(args: argparse.Namespace, e: BaseException) -> tuple[str, int]:
    """What to say (and the exit code) when a server cannot be reached: a Cassandra TLS refusal or a wrong
    local data centre, found by asking again, else the error itself."""
    from app.failures.error_text import describe
    from app.failures.refusals import refusal

    untrusted = _cassandra_tls_refusal(args)
    refused = None if untrusted is None else refusal(untrusted, cassandra_role=_cassandra_role(args))
    if refused is not None:
        return refused.line, BAD_INPUT
    wrong = _wrong_local_dc(args)
    if wrong is not None:
        return wrong, BAD_INPUT
    return f"cannot reach a server: {describe(e)}", FAILED


def _unreachable(e: BaseException) -> bool:
    """A server that cannot be reached or answered (Kafka, Cassandra, the network): no bug, one line."""
    from cassandra import DriverException, OperationTimedOut
    from cassandra.cluster import NoHostAvailable
    from confluent_kafka import KafkaException

    from spouts.errors import SpoutError

    return isinstance(e, NoHostAvailable | OperationTimedOut | DriverException | KafkaException | SpoutError | OSError)


def _cassandra_tls_refusal(args: argparse.Namespace) -> Exception | None:
    """Whether the config's Cassandra refuses this client's TLS (a failed connection asked again, typed)."""
    from app.service.access import cassandra_tls_refusal

    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        from app.commands.common import load_config

        return cassandra_tls_refusal(load_config(path).cassandra_settings())
    except Exception:  # noqa: BLE001 - only for the message
        return None


def _wrong_local_dc(args: argparse.Namespace) -> str | None:
    """Whether the config's ``cassandra.local_dc`` is a data centre the cluster does not have (then: one line)."""
    from app.service.access import wrong_local_dc

    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        from app.commands.common import load_config

        return wrong_local_dc(load_config(path).cassandra_settings())
    except Exception:  # noqa: BLE001 - only for the message
        return None


def _cassandra_role(args: argparse.Namespace) -> str | None:
    """The configured Cassandra user, to name it in a refusal (None without a readable config)."""
    path = getattr(args, "config", None)
    if not path:
        return None
    try:
        from app.commands.common import load_config

        cassandra = load_config(path).cassandra
    except Exception:  # noqa: BLE001 - only for the message
        return None
    return cassandra.username if cassandra is not None else None


if __name__ == "__main__":
    sys.exit(main())
