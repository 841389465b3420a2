"""The ``spark:`` section: the master, the Spark conf, the Kafka reader and the task counts."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import (
    Field,
    PlainValidator,
    WithJsonSchema,
)

from app.config.schema.fields import Positive, Scalar, Section, Text, none_is_empty


def _removed_reader(v: Any) -> str | None:
    """``spark.kafka_reader``: ``python`` (the only read path, so a no-op) or nothing; the JVM's values are refused."""
    if v is None or (isinstance(v, str) and v.strip().lower() == "python"):
        return None if v is None else "python"
    msg = (
        f"{v!r} is no longer accepted: the JVM read path was removed and Python reads every format "
        "(delete this setting)"
    )
    raise ValueError(msg)


_RemovedReader = Annotated[str | None, PlainValidator(_removed_reader),
                           WithJsonSchema({"enum": ["python"], "type": "string", "deprecated": True})]


class SparkModel(Section):
    master: Text = Field(default="local[*]", description=(
        "`local[*]` is this machine's cores, or in a container with a CPU limit (cgroup quota) that limit rounded "
        "up (`python -m app run` logs `sized to the container: ...`); `local[N]` (task retries are added; a txid "
        "reads in at most N tasks and commits in N, one shuffle partition per core); a cluster master "
        "`spark://...`, `k8s://...`, `yarn` (a txid reads in as many tasks as the executors have cores and "
        "commits in Spark's default parallelism, both chosen again before every txid as executors come and go; "
        "`spark.sql.shuffle.partitions`, unless set, follows the commit tasks). A cluster master needs "
        "`state.backend: cassandra` (`sqlite` is refused: its file is on one machine), an address the executors "
        "reach (`spark.driver.host` or `SPARK_LOCAL_IP`) and this project installed at the service's interpreter "
        'path on the workers: [operations.md](operations.md), "Run on a Spark cluster"'))
    app_name: Text = Field(default="trident", description="the Spark application's name (Spark UI, cluster manager)")
    conf: Annotated[dict[str, Scalar], none_is_empty(dict)] = Field(default_factory=dict, description=(
        "extra Spark settings (`spark.driver.memory: 2g`, ...); they override the service's defaults. Without "
        "`spark.driver.memory`, a container with a memory limit gets half of it as the driver's heap"))
    executors_gone_s: Positive = Field(default=60.0, description=(
        "a cluster master with no executor for longer: every pipeline `degraded` on `/readyz` with the reason, "
        "an error logged, `trident_spark_executors` at 0"))
    kafka_reader: _RemovedReader = Field(default=None, description=(
        "deprecated, no effect: every format is read by librdkafka in Python workers, the only read path. "
        "`python` is still accepted (`validate` and the start-up log warn: delete the line); `jvm` and `auto` are "
        "refused: the JVM read path (Spark's own Kafka source) was removed, as it was no faster at any size measured "
        'and cost more per txid ([performance.md](performance.md), "One read path")'))

    def deprecated(self) -> list[str]:
        """What to delete from this section: settings that are accepted but do nothing."""
        if self.kafka_reader is None:
            return []
        return ["spark.kafka_reader is deprecated and has no effect (Python reads every format): delete it"]
