# syntax=docker/dockerfile:1
# trident-stream: the service (`python -m app run`) and, on Kubernetes, its own Spark executors.
#   docker build -t trident-stream:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#   docker run --read-only --tmpfs /tmp -v "$PWD/config.yaml:/etc/trident/config.yaml:ro" trident-stream:0.1.0
# (`make image` does the same with buildah or Docker.) BASE_IMAGE: any Debian bookworm image with Python 3.11
# (`python`, venv and pip); both stages start from it, nothing else is pulled. Pin a digest in your registry
# for byte-identical builds (`--build-arg BASE_IMAGE=python:3.11-slim-bookworm@sha256:...`).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# -- build: a virtualenv with the dependencies alone, read from pyproject.toml. This layer is rebuilt
# when pyproject.toml changes, never for a change of the code (copied into the final stage below).
FROM ${BASE_IMAGE} AS build
# PIP_CERT: a CA bundle pip trusts, for a build behind a TLS-inspecting proxy (`make image` passes the
# host's, mounted into this stage only; nothing of it reaches the final image).
ARG PIP_CERT
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml ./
# spark-home: a link to PySpark's distribution wherever this base image's Python keeps site-packages.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --requirement requirements.txt \
 && ln -s "$(/opt/venv/bin/python -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent)')" /opt/venv/spark-home \
 && test -x /opt/venv/spark-home/bin/spark-submit
# The native Kafka reader: a C compiler and librdkafka's headers in this stage only (the final image gets the one
# library, which runs on the librdkafka the venv's confluent-kafka loads).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev librdkafka-dev \
 && rm -rf /var/lib/apt/lists/*
COPY spouts/kafka/native/rangeread.c spouts/kafka/native/build.sh /src/native/
RUN bash /src/native/build.sh

# -- runtime: Python, a Java 17 runtime for Spark, tini as PID 1, a non-root user
FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG UID=10001
ARG GID=10001
ARG VERSION=0.1.0
ARG REVISION=""
LABEL org.opencontainers.image.title="trident-stream" \
      org.opencontainers.image.description="Exactly-once Kafka -> Spark -> Cassandra streaming service" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://example.invalid/trident-stream" \
      org.opencontainers.image.base.name="${BASE_IMAGE}"
# Debian's security updates replace exact package versions, so openjdk is pinned by the Debian
# release of the base tag; tini's bookworm version never changes and is pinned exactly.
# /opt/java: JAVA_HOME whatever the architecture (Debian's JVM directory is named after it).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini=0.19.0-1+b3 procps \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java \
 && test -x /opt/java/bin/java \
 && groupadd --gid "${GID}" trident \
 && useradd --uid "${UID}" --gid trident --no-create-home --home-dir /tmp --shell /usr/sbin/nologin trident \
 && mkdir -p /etc/trident /var/lib/trident/data /var/lib/trident/spark \
 && chown -R trident:trident /var/lib/trident
COPY --from=build /opt/venv /opt/venv
# The code last: a change of it rebuilds these small layers only (root-owned, read-only for the user).
COPY app /opt/trident/app
COPY spouts /opt/trident/spouts
COPY states /opt/trident/states
COPY --from=build /src/native/_rangeread.so /opt/trident/spouts/kafka/native/_rangeread.so
# Read-only root filesystem: nothing is written outside /tmp and /var/lib/trident (volumes).
# SPARK_HOME is PySpark's own distribution (its jars include the Kubernetes scheduler).
ENV PATH=/opt/venv/bin:/opt/java/bin:$PATH \
    PYTHONPATH=/opt/trident \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    JAVA_HOME=/opt/java \
    SPARK_HOME=/opt/venv/spark-home \
    SPARK_LOCAL_DIRS=/var/lib/trident/spark
WORKDIR /var/lib/trident
VOLUME ["/tmp", "/var/lib/trident/data", "/var/lib/trident/spark"]
USER ${UID}:${GID}
EXPOSE 9400
# tini is PID 1: it forwards SIGTERM to the service (which finishes its txid) and reaps Spark's children.
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "app"]
CMD ["run", "--config", "/etc/trident/config.yaml"]
