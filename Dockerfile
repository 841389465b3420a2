# syntax=docker/dockerfile:1
# trident-stream: the service (`python -m app run`) and, on Kubernetes, its own Spark executors.
#   docker build -t trident-stream:0.1.0 .
#   docker run --read-only --tmpfs /tmp -v "$PWD/config.yaml:/etc/trident/config.yaml:ro" trident-stream:0.1.0
# Base images are pinned to exact tags (pin a digest in your registry for byte-identical builds).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# -- build: the project's wheel and the wheels of its dependencies (no compilers reach the final image)
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY spouts ./spouts
COPY states ./states
RUN pip wheel --wheel-dir /wheels . \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels trident-stream

# -- runtime: Python 3.11, a Java 17 runtime for Spark, tini as PID 1, a non-root user
FROM ${PYTHON_IMAGE}
ARG UID=10001
# Debian's security updates replace exact package versions, so openjdk is pinned by the Debian
# release of the base tag; tini's bookworm version never changes and is pinned exactly.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini=0.19.0-1 procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid "${UID}" trident \
 && useradd --uid "${UID}" --gid trident --no-create-home --home-dir /tmp --shell /usr/sbin/nologin trident \
 && mkdir -p /etc/trident /var/lib/trident/data /var/lib/trident/spark \
 && chown -R trident:trident /var/lib/trident
COPY --from=build /opt/venv /opt/venv
# Read-only root filesystem: nothing is written outside /tmp and /var/lib/trident (volumes).
# SPARK_HOME is PySpark's own distribution (its jars include the Kubernetes scheduler); java is on PATH.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    SPARK_HOME=/opt/venv/lib/python3.11/site-packages/pyspark \
    SPARK_LOCAL_DIRS=/var/lib/trident/spark
WORKDIR /var/lib/trident
VOLUME ["/tmp", "/var/lib/trident/data", "/var/lib/trident/spark"]
USER 10001:10001
EXPOSE 9400
# tini is PID 1: it forwards SIGTERM to the service (which finishes its txid) and reaps Spark's children.
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "app"]
CMD ["run", "--config", "/etc/trident/config.yaml"]
