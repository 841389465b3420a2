"""The upsert settings in a config: latest/first aggregates, state.tombstones, state.ttl_s."""

from __future__ import annotations

from typing import Any

import pytest

from app.config import compile_pipeline, describe, parse
from app.topology.topology import PersistentAggregate
from states.aggregators import First, Latest
from tests.service.test_config import doc, error

UPSERT = {
    "pipelines__0__transforms": [{"map": ["CAST(key AS STRING) AS id",
                                          "CAST(get_json_object(CAST(value AS STRING), '$.amount') AS BIGINT) AS amount"]}],
    "pipelines__0__group_by": ["id"],
    "pipelines__0__aggregates": [{"latest": {"field": "amount", "as": "amount"}}],
}
CASSANDRA = {"cassandra": {"contact_points": ["127.0.0.1"]}, "pipelines__0__state__backend": "cassandra"}


def test_an_upsert_pipeline_compiles_to_latest_with_its_settings() -> None:
    """latest/first, tombstones and ttl_s reach the topology's sink (and validate's description)."""
    config = parse(doc(**UPSERT, **CASSANDRA, pipelines__0__state__tombstones="delete",
                       pipelines__0__state__ttl_s="86400"), {})
    compiled = compile_pipeline(config, "word-count")
    sink = compiled.topology.sinks[0][1]
    assert isinstance(sink, PersistentAggregate)
    assert isinstance(sink.aggregates[0].aggregator, Latest)
    assert (sink.tombstones, sink.ttl_s) == ("delete", 86_400)
    assert [a.output for a in sink.stored_aggregates] == ["amount", "deleted"]
    described = describe(compiled.topology, compiled.coordinator)["sinks"][0]
    assert (described["tombstones"], described["ttl_s"]) == ("delete", 86_400)
    assert described["aggregates"][0]["function"] == "latest"
    first = parse(doc(**{**UPSERT, "pipelines__0__aggregates": [{"first": {"field": "amount"}}]}), {})
    first_sink = compile_pipeline(first, "word-count").topology.sinks[0][1]
    assert isinstance(first_sink, PersistentAggregate)
    assert isinstance(first_sink.aggregates[0].aggregator, First)


@pytest.mark.parametrize(("changes", "path", "message"), [
    ({"pipelines__0__state__tombstones": "drop"}, "pipelines[0].state.tombstones", "not one of delete, ignore"),
    ({"pipelines__0__state__tombstones": "delete", "pipelines__0__aggregates": [
        {"latest": {"field": "amount"}}, {"count": {"as": "n"}}]}, "pipelines[0].aggregates[1]",
     "every aggregate to be latest"),
    ({"pipelines__0__state__tombstones": "delete", "pipelines__0__aggregates": [
        {"latest": {"field": "amount", "as": "deleted"}}]}, "pipelines[0].aggregates[0]", "tombstone flag"),
    ({"pipelines__0__state__ttl_s": 3600}, "pipelines[0].state.ttl_s", "needs backend cassandra"),
    ({**CASSANDRA, "pipelines__0__state__ttl_s": 0}, "pipelines[0].state.ttl_s", "must be >= 1"),
    ({"pipelines__0__aggregates": [{"latest": {"field": "amout"}}]}, "pipelines[0].aggregates[0].latest.field",
     "unknown column 'amout'"),
    ({"pipelines__0__aggregates": [{"latest": {}}]}, "pipelines[0].aggregates[0].latest.field", "required"),
])
def test_refused_with_its_path(changes: dict[str, Any], path: str, message: str) -> None:
    """Each upsert setting that cannot work is refused at validate time, naming the field."""
    e = error(doc(**{**UPSERT, **changes}))
    assert e.path == path, str(e)
    assert message in e.message, str(e)
