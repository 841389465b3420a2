"""``python -m tests.bench``: the commit-path benchmark (:mod:`tests.bench.commit_path`)."""

import sys

from tests.bench.commit_path import main

if __name__ == "__main__":  # not again in the benchmark's spawned client processes
    main(sys.argv[1:])
