"""Run a standalone CQL test server: `python -m tests.cqlserver --port 9042`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .server import CqlServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cqlserver", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9042, help="0 picks a free port")
    parser.add_argument("--username")
    parser.add_argument("--password")
    parser.add_argument("--data-center", default="datacenter1")
    parser.add_argument("--protocol-versions", default="4,5", help="comma separated subset of 4,5")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    versions = tuple(int(v) for v in args.protocol_versions.split(","))
    server = CqlServer(args.host, args.port, username=args.username, password=args.password,
                       data_center=args.data_center, protocol_versions=versions)
    server.start()
    print(f"cqlserver listening on {server.contact_point} (protocol v{'/v'.join(map(str, versions))}, "
          f"dc {args.data_center})", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
