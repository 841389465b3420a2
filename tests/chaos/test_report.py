"""The Spark cluster section of docs/reliability.md: rendered from the cluster kill test's record, or absent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.chaos.report import cluster_section

RECORD: dict[str, Any] = {
    "started": "2026-11-25 16:00 UTC", "seconds": 301.4, "kills": ["executor 11", "worker 0"], "sentences": 9000,
    "words": 81000, "keys": 40, "lost": 0, "twice": 0, "differing": 0, "commits": 57, "cpus": 2,
    "load_before": 9.5, "load_after": 12.25,
    "command": "SPARK_CLUSTER_RECORD=docs/reliability/spark-cluster.json REQUIRE_REAL_PEERS=1 python -m pytest "
               "tests/service/test_spark_cluster.py"}


def test_no_record_no_section(tmp_path: Path) -> None:
    assert cluster_section(tmp_path / "spark-cluster.json") == []


def test_the_section_says_what_the_recorded_run_found(tmp_path: Path) -> None:
    record = tmp_path / "spark-cluster.json"
    record.write_text(json.dumps(RECORD))
    text = "\n".join(cluster_section(record))
    assert text.startswith("## Spark standalone cluster")
    assert ("**Passed** on 2026-11-25 16:00 UTC: lost 0, counted twice 0 (0 keys differ) over 40 keys, 81000 words "
            "in 9000 acknowledged sentences; 57 txid commits logged, 301 s in all.") in text
    assert "- SIGKILLs: executor 11; worker 0" in text
    assert RECORD["command"] in text
    record.write_text(json.dumps(RECORD | {"lost": 3, "differing": 2}))
    assert "**FAILED** on 2026-11-25 16:00 UTC: lost 3, counted twice 0 (2 keys differ)" in "\n".join(
        cluster_section(record))
