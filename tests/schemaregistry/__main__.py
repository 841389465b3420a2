"""``python -m tests.schemaregistry [port]``: the test registry in the foreground, until interrupted."""

import sys
import time

from tests.schemaregistry.server import SchemaRegistryServer

with SchemaRegistryServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8081) as server:
    print(f"schema registry test peer at {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
