"""A CQL native-protocol test server (fake single-node Cassandra 4.1) in pure Python.

    from tests.cqlserver import CqlServer, Fault

See README.md in this directory for what is implemented and the fault API.
"""

from .faults import Fault
from .server import CqlServer
from .stats import RequestRecord, Stats

__all__ = ["CqlServer", "Fault", "RequestRecord", "Stats"]
