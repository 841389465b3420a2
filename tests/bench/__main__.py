"""``python -m tests.bench``: the commit-path benchmark (:mod:`tests.bench.commit_path`);
``python -m tests.bench decode``: the record formats' decode cost (:mod:`tests.bench.decode`)."""

import sys

from tests.bench.commit_path import main

if sys.argv[1:2] == ["decode"]:
    from tests.bench.decode import main as decode

    decode(sys.argv[2:])
else:
    main(sys.argv[1:])
