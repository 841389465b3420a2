"""``python -m tests.bench``: the commit-path benchmark (:mod:`tests.bench.commit_path`)."""

import sys

from tests.bench.commit_path import main

main(sys.argv[1:])
