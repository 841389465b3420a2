"""``python -m tests.bench [suite|commit|all] [options]``: the benchmarks.

* ``suite`` (default): throughput against raw consume, Spark Structured Streaming and Quix Streams,
  fixed cost, latency (:mod:`tests.bench.suite`);
* ``commit``: the commit path against the raw LWT ceiling (:mod:`tests.bench.commit_path`);
* ``commit-cluster``: the commit path on a Spark standalone cluster, failed LWTs and reads when commit
  partitions move between executors (:mod:`tests.bench.commit_cluster`);
* ``fixedcost``: CPU per txid of variants of the executor side by side, after the JIT's warm-up
  (:mod:`tests.bench.fixed_cost`; needs ``--bootstrap``, not in ``all``);
* ``servercost``: the Cassandra server's CPU per 1,000 keys as LWTs, counter updates, plain writes and
  conditional batches per partition (:mod:`tests.bench.server_cost`; a Cassandra on this machine, not in ``all``);
* ``contention``: a reader's single-key query's p50 and p99 while the pipeline commits into its table, against
  the same reader idle, per table layout (:mod:`tests.bench.contention`; needs ``--bootstrap`` and a Cassandra,
  not in ``all``);
* ``decode``: input formats' decoding cost (:mod:`tests.bench.decode`);
* ``badrecords``: a txid with bad records (decode errors, null keys, transform errors) against the same
  txid clean (:mod:`tests.bench.bad_records`);
* ``all``: each of them but ``commit-cluster`` (it starts a Spark cluster of its own) with its defaults
  (options go to the suite; the bad-records bench gets the suite's ``--bootstrap``, and runs into
  Cassandra when CASSANDRA_CONTACT_POINTS names one).
"""

import importlib
import os
import sys


def badrecords_args(suite_args: list[str]) -> list[str]:
    """The bad-records bench's options in ``all``: the suite's real Kafka, and Cassandra when one is named."""
    out = []
    for i, arg in enumerate(suite_args):
        if arg == "--bootstrap" and i + 1 < len(suite_args):
            out += ["--bootstrap", suite_args[i + 1]]
        elif arg.startswith("--bootstrap="):
            out.append(arg)
    return out + (["--state", "cassandra"] if os.environ.get("CASSANDRA_CONTACT_POINTS") else [])


BENCHES = {"suite": "tests.bench.suite", "commit": "tests.bench.commit_path", "decode": "tests.bench.decode",
           "badrecords": "tests.bench.bad_records", "commit-cluster": "tests.bench.commit_cluster", "fixedcost": "tests.bench.fixed_cost",
           "servercost": "tests.bench.server_cost", "contention": "tests.bench.contention"}
ON_ITS_OWN = {"commit-cluster", "fixedcost", "servercost", "contention"}  # not in ``all``

if __name__ == "__main__":  # not again in the benchmark's spawned client processes
    args = sys.argv[1:]
    which = args.pop(0) if args and args[0] in (*BENCHES, "all") else "suite"
    for name in [n for n in BENCHES if n not in ON_ITS_OWN] if which == "all" else [which]:
        try:
            module = importlib.import_module(BENCHES[name])
        except ModuleNotFoundError as e:
            if which == "all" and e.name == BENCHES[name]:
                continue
            raise
        print(f"== {name} ==", flush=True)
        if which != "all" or name == "suite":
            module.main(args)
        else:
            module.main(badrecords_args(args) if name == "badrecords" else [])
