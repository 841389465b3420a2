"""Spark's Kafka connector on the session's classpath: the jars ``make jars`` copies into ``.jars/``.

The list (``kafka-connector.txt`` beside this module) names each jar by its Maven coordinates, at exactly
the installed PySpark's version. :func:`session_jars` is what :func:`app.spark.session.spark_session` adds
to ``spark.jars``; :func:`on_classpath` asks a running session whether its JVM can load the source.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app.spark.jvm import gateway

#: The connector's Maven coordinates, one ``group:artifact:version`` a line.
LIST = Path(__file__).with_name("kafka-connector.txt")
#: Where ``make jars`` (and the image's build) put them; ``TRIDENT_JARS`` overrides it.
JARS_DIR = Path(os.environ.get("TRIDENT_JARS") or Path(__file__).resolve().parents[2] / ".jars")
#: The class Spark's ``format("kafka")`` resolves to.
SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def coordinates() -> list[str]:
    """The connector's jars as Maven coordinates (the list's lines without comments)."""
    lines = (line.strip() for line in LIST.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def jar_files() -> list[Path]:
    """Each coordinate's file in :data:`JARS_DIR` (``artifact-version.jar``), whether it exists or not."""
    return [JARS_DIR / f"{c.split(':')[1]}-{c.split(':')[2]}.jar" for c in coordinates()]


def missing() -> list[str]:
    """The jar files not in :data:`JARS_DIR` (empty: the connector is complete)."""
    return [p.name for p in jar_files() if not p.is_file()]


def session_jars() -> list[str]:
    """What ``spark.jars`` gets: every jar of the connector, or none when one is missing."""
    return [] if missing() else [str(p) for p in jar_files()]


def on_classpath(spark: Any) -> bool:
    """Whether ``spark``'s driver can load Spark's Kafka source (py4j answers a class it cannot load with a
    package)."""
    from py4j.java_gateway import JavaClass

    jvm = gateway(spark)
    found = jvm
    for part in SOURCE_CLASS.split("."):
        found = getattr(found, part)
    return isinstance(found, JavaClass)


def missing_message() -> str:
    """Why the JVM reader cannot run here, naming the jars and the command that fetches them."""
    return (f"spark.kafka_reader jvm needs Spark's Kafka connector on the classpath: {', '.join(missing()) or 'the jars'} "
            f"not found in {JARS_DIR} (run `make jars`, or set TRIDENT_JARS to a folder holding the jars listed in "
            f"{LIST.name})")
