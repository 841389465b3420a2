# Everything a newcomer runs: `make demo` (the main job on the embedded default) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv tools docs demo test test-real test-compat test-fast fuzz bench lint coverage clean chaos chaos-short \
	chaos-short-real image test-k8s test-replicas test-replicas-short test-native-sanitized

NATIVE := spouts/kafka/native/_rangeread.so

venv: $(STAMP) $(NATIVE)

$(STAMP): pyproject.toml
	@echo "[1/3] creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	@echo "[2/3] upgrading pip"
	$(PY) -m pip install --quiet --upgrade pip
	@echo "[3/3] installing trident-stream and its dependencies (PySpark, about 400 MB with pyarrow and pandas;"
	@echo "      a few minutes on a slow link): each package is named as pip collects it"
	$(PY) -m pip install --progress-bar off -e '.[test]'
	@touch $(STAMP)
	@echo "installed: $(VENV)"

# The native Kafka reader (C, run on the librdkafka confluent-kafka loads; Debian's librdkafka-dev for its headers,
# installed when missing). Where it cannot be built the service reads through confluent-kafka (kafka.reader: auto);
# CI fails instead.
$(NATIVE): spouts/kafka/native/rangeread.c spouts/kafka/native/build.sh $(STAMP)
	bash spouts/kafka/native/build.sh || { test -z "$$CI" && echo "make: the native Kafka reader is not \
	built (above): the service reads through confluent-kafka's messages (kafka.reader: auto)"; }

# Debian's prometheus (server + promtool) for the deployment tests; installed only when missing.
tools:
	bash tests/deploy/install_tools.sh

demo: venv
	@echo "running the demo: an in-process Kafka, a generated stream, word count on Spark (Spark takes a while to start)"
	$(PY) -m app demo

# Two workers by default: most of the suite's time is spent waiting on service processes, Spark and the
# servers, so a second worker shortens the run even on two cores (PYTEST_WORKERS=0 runs in one process).
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist worksteal)

# The suite measures branch coverage of the product in the test process itself (about a fifth more time on the
# in-process tests, little on the rest, which waits on servers and Spark) and fails under COVERAGE_FLOOR; the
# service processes and Spark's Python workers the tests start are not measured. The per-file table: make coverage.
COVERAGE_FLOOR ?= 63
test: venv tools
	$(PY) -m pytest $(PYTEST_PARALLEL) --durations=20 --cov --cov-report= --cov-fail-under=$(COVERAGE_FLOOR)

# The same suite against real Apache Kafka, Cassandra and a Schema Registry started on loopback from a
# realstack folder (REALSTACK_DIR, or shared/realstack-next beside the clone, else shared/realstack; see
# tests/realstack.py), with REQUIRE_REAL_PEERS=1; the servers are stopped and wiped afterwards. Your own
# clusters: see the README.
test-real: venv tools
	python3 -m tests.realstack run -- $(PY) -m pytest $(PYTEST_PARALLEL) --durations=20

# The compatibility lane: the real-server suites on the older servers (Kafka 3.3.1, Cassandra 4.0.14), then
# the Cassandra commit path on Cassandra 5.0 with Paxos v2 (docs/operations.md, "Supported versions").
COMPAT_TESTS := tests/states tests/kafka tests/commands tests/schemaregistry tests/spark/test_real_servers.py \
	tests/spark/test_state_refusals.py tests/spark/test_formats.py::test_json_null_and_byte_order_marks_on_a_real_kafka \
	tests/service/test_secured.py::test_word_count_on_secured_servers_matches_the_ground_truth_across_a_sigkill
PAXOS_TESTS  := tests/states/test_cassandra_paxos.py tests/states/test_backing_map_contract.py \
	tests/states/test_txstate_contract.py tests/states/test_upsert_contract.py \
	tests/states/test_cassandra_backing_map.py tests/states/test_cassandra_shards.py tests/spark/test_real_servers.py

test-compat: venv tools
	python3 -m tests.realstack run --folder realstack -- $(PY) -m pytest $(COMPAT_TESTS)
	CASSANDRA_PAXOS_VARIANT=v2 python3 -m tests.realstack run --folder realstack-next -- $(PY) -m pytest $(PAXOS_TESTS)

test-fast: venv  # everything but the `slow` tests: Spark end to end, the service runs, the kill tests
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow"

# The native Kafka reader built with AddressSanitizer and UndefinedBehaviorSanitizer (any report stops the run), over
# its tests and the property test of record shapes against confluent-kafka's reader, on the real Kafka of
# KAFKA_BOOTSTRAP_SERVERS (required). libasan is preloaded into Python; CPython's own leaks are not reported.
NATIVE_SANITIZED ?= $(abspath $(VENV))/rangeread-sanitized.so
NATIVE_SHAPES_EXAMPLES ?= 25
test-native-sanitized: venv
	RANGEREAD_OUT=$(NATIVE_SANITIZED) RANGEREAD_CFLAGS="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
	-fno-sanitize-recover=all" bash spouts/kafka/native/build.sh
	LD_PRELOAD="$$($${CC:-cc} -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 RANGEREAD_LIBRARY=$(NATIVE_SANITIZED) REQUIRE_REAL_PEERS=1 \
	NATIVE_SHAPES_EXAMPLES=$(NATIVE_SHAPES_EXAMPLES) $(PY) -m pytest --capture=sys \
	tests/kafka/test_native_reader.py tests/kafka/test_native_memory.py tests/kafka/test_native_shapes.py

# The record decoders' fuzz tests with a bigger budget, unseeded (minutes rather than seconds): every value of
# every format decodes or is a bad record with a reason, judged alike alone and in a batch, in a process that may crash.
FUZZ_EXAMPLES ?= 2000
fuzz: venv
	DECODER_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/kafka/formats/test_fuzz.py -k "values_decode"

# ruff (style, imports, likely bugs, private access) and mypy (strict everywhere); config in pyproject.toml
# the guide's field tables and the JSON Schema exports, written from the config models (tests fail when stale)
docs: venv
	$(PY) -m app.config.reference

lint: venv
	$(VENV)/bin/ruff check app states spouts tests
	$(VENV)/bin/mypy

# Branch coverage of the product (config: [tool.coverage] in pyproject.toml) over the unit lane, with the
# per-file table: the fast tests of states, app, config and spouts (about 6 minutes on one process; the
# real-Cassandra ones run when CASSANDRA_CONTACT_POINTS is set). The floor is the unit lane's figure when it was
# set (63.0%, without real peers); the whole suite, which `make test` measures, covers more: raise the floor
# as tests are added, never lower it.
COVERAGE_TESTS := tests/states tests/app tests/config tests/spouts
coverage: venv
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow" --cov --cov-report=term:skip-covered \
		--cov-fail-under=$(COVERAGE_FLOOR) $(COVERAGE_TESTS)

# The replica lane (tests/replicas): a cluster of 3 Cassandra nodes and 3 Kafka brokers started from realstack-next
# on loopback (keyspace RF 3, topics RF 3 with min.insync.replicas 2), nodes SIGKILLed, hung and restarted under a
# running pipeline, every scenario compared key by key with the producer's truth; about 25 minutes.
# REPLICA_SCENARIOS=a,c selects scenarios (a-g: docs/reliability.md), REPLICA_ROUNDS the faults per scenario.
# The short form CI runs: scenarios a, b and d, one round each, a and b on one table layout each (about 8 minutes).
REPLICA_SCENARIOS ?= a,b,c,d,e,f,g
REPLICA_ROUNDS    ?= 3
test-replicas: venv
	REPLICA_LANE=1 REPLICA_SCENARIOS=$(REPLICA_SCENARIOS) REPLICA_ROUNDS=$(REPLICA_ROUNDS) \
		$(PY) -m pytest tests/replicas -s -v --durations=0

test-replicas-short: venv
	REPLICA_LANE=1 REPLICA_SHORT=1 REPLICA_SCENARIOS=a,b,d REPLICA_ROUNDS=1 $(PY) -m pytest tests/replicas -s -v \
		--durations=0

PEER       := .venv-peer
PEER_STAMP := $(PEER)/.installed

# The peer (Quix Streams) pins an older confluent-kafka than the product: it gets its own virtualenv.
$(PEER_STAMP): pyproject.toml
	$(PYTHON) -m venv $(PEER)
	$(PY) -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench-peer"]))' > $(PEER)/requirements.txt
	$(PEER)/bin/pip install --quiet -r $(PEER)/requirements.txt
	touch $(PEER_STAMP)

# Spark Structured Streaming's Kafka source (spark-sql-kafka-0-10 of the installed PySpark), fetched once
# from Maven Central into the bench's ivy cache.
SSS_STAMP := .benchmarks/ivy/.fetched

$(SSS_STAMP): pyproject.toml
	$(PY) -m tests.bench.sss_peer --fetch
	touch $(SSS_STAMP)

# Throughput against raw consume, Spark Structured Streaming and Quix Streams, fixed cost, latency (table +
# bench.png), then the commit path; 3 repetitions by default (BENCH_ARGS="--repeat 1 --records 100000" for a
# quick look; BENCH_ARGS="--bootstrap HOST:PORT" and CASSANDRA_CONTACT_POINTS for real servers).
bench: venv $(PEER_STAMP) $(SSS_STAMP)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m tests.bench all --repeat 3 $(BENCH_ARGS)

# The chaos suite (not part of `make test`): SIGKILLs at every protocol point, Kafka and Cassandra faults,
# standby and zombie, retention; compares with the producer's truth and writes docs/reliability.md.
CHAOS_SEED    ?= $(shell date +%s)
CHAOS_KILLS   ?= 200
CHAOS_MINUTES ?= 25
CHAOS_MALFORMED ?= 10000
# (add `real` for the real-server lane, which needs a realstack folder)
CHAOS_SCENARIOS ?= random-kills,protocol-points,cassandra-faults,retention,bad-records
CHAOS_STAMP := $(VENV)/.chaos-installed

$(CHAOS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test,chaos]'
	touch $(CHAOS_STAMP)

chaos: $(CHAOS_STAMP)
	$(PY) -m tests.chaos --seed $(CHAOS_SEED) --kills $(CHAOS_KILLS) --minutes $(CHAOS_MINUTES) \
		--malformed $(CHAOS_MALFORMED) --scenarios $(CHAOS_SCENARIOS) --report docs/reliability.md

# The short seeded version CI runs (about 10 minutes): fails on any difference from the truth.
chaos-short: $(CHAOS_STAMP)
	$(PY) -m tests.chaos --seed 14 --kills 24 --minutes 3 --malformed 1000 --scenarios $(CHAOS_SCENARIOS)

# The short seeded real-server lane (needs a realstack folder: REALSTACK_DIR, or one beside the clone).
chaos-short-real: $(CHAOS_STAMP)
	$(PY) -m tests.chaos --seed 14 --kills 8 --minutes 4 --malformed 300 --scenarios real

# The image from the Dockerfile: with a realk8s cluster up (shared/realk8s beside the clone, or REALK8S_DIR), its
# buildah on the Debian base it provides, loaded into the cluster; else Docker, else plain buildah.
# IMAGE names it (default localhost/trident-stream:<appVersion>-<commit>).
IMAGE ?=
image: venv
	$(PY) -m tests.k8s.image $(IMAGE)

# helm install on a real single-node Kubernetes (not part of `make test`; needs root): starts realk8s and a private
# Kafka and Cassandra from realstack (shared/ beside the clone, or REALK8S_DIR / REALSTACK_DIR), builds and loads the
# image, runs the scenarios (K8S_SCENARIOS=image,a,b,d,e,c,f by default; e.g. K8S_SCENARIOS=a,b,d) and writes
# docs/deploy-report.md. The cluster stays up for the next run (its down.sh stops it).
K8S_SCENARIOS ?=
test-k8s: venv tools
	K8S_SCENARIOS=$(K8S_SCENARIOS) $(PY) -m pytest tests/k8s -v --durations=0

clean:
	rm -rf $(VENV) $(PEER) .pytest_cache .hypothesis .benchmarks $(NATIVE)
