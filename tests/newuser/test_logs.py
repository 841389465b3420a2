"""Every line logged from a pipeline's thread names the pipeline."""

from __future__ import annotations

import io
import logging
import threading

from app.logs import NamesItsPipeline


def test_a_pipelines_lines_name_it() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(NamesItsPipeline())
    logger = logging.getLogger("tests.newuser.names")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        def work() -> None:
            logger.warning("txid %d attempt %d failed; replaying", 3, 1)
            logger.info("topology wc-1: healthy again")

        t = threading.Thread(target=work, name="pipeline-wc-1")
        t.start()
        t.join()
        logger.info("starting Spark")
    finally:
        logger.removeHandler(handler)
    assert out.getvalue().splitlines() == ["pipeline wc-1: txid 3 attempt 1 failed; replaying",
                                           "topology wc-1: healthy again", "starting Spark"]
