# lakestream: two commands matter. `make demo` runs the main job on the embedded default; `make test`
# runs the whole suite. Both bootstrap what they need (venv, pip install, Maven build) and are idempotent.
VENV   := .venv
VPY    := $(VENV)/bin/python
# The CPython the venv is made from: PYTHON when given, else the fastest CPython 3.10-3.12 on PATH
# (devtools/pick_python.py: PGO/LTO builds run the Python workers about a fifth faster), chosen only
# while there is no venv yet.
ifeq ($(origin PYTHON),undefined)
  ifeq ($(wildcard $(VPY)),)
    PYTHON := $(shell python3 devtools/pick_python.py || echo python3)
  else
    PYTHON := python3
  endif
endif
STAMPS := .lakestream/stamps
CHROMIUM ?= chromium
# Test worker processes: one leaves a 2-core machine partly idle while its jobs start and checkpoint,
# two keep it busy; PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 2
# Flags of `lakestream demo`, e.g. DEMO_ARGS=--object-store (tables and checkpoints on the local S3 server).
DEMO_ARGS ?=
JAVA_SOURCES := $(shell find jvm/src -name '*.java' 2>/dev/null)

.PHONY: demo test unit lint typecheck bootstrap venv jvm jvm-test tools browser bench bench-silver bench-explain bench-freshness profile clean

demo: bootstrap
	$(VPY) -m cli demo $(DEMO_ARGS)

test: bootstrap browser lint typecheck jvm-test
	$(VPY) -m pytest -q --durations=25 -n $(PYTEST_WORKERS) --dist loadfile tests

unit: bootstrap
	$(VPY) -m pytest -q tests/unit

lint: venv
	$(VPY) -m ruff check .

typecheck: venv
	$(VPY) -m mypy --strict lakestream runtime storage sinks sources maintenance merge_on_read udfs batch serving flink_jobs cli demo devtools benchmarks

bootstrap: tools venv jvm

tools:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "lakestream: '$(PYTHON)' not found: install Python 3.10-3.12 (or run make PYTHON=python3.11)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' || { echo "lakestream: apache-flink 2.2 needs Python 3.10-3.12; run make PYTHON=/path/to/python3.11"; exit 1; }
	@command -v java >/dev/null 2>&1 || { echo "lakestream: 'java' not found: install a JDK 17 (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "lakestream: 'mvn' not found: install Maven 3.8+ (apt-get install maven)"; exit 1; }

# The page of `lakestream serve` is tested in a real headless Chromium (tests/integration/test_serve_page.py).
browser:
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "lakestream: installing Debian's chromium for the browser tests (apt-get install chromium)"; \
	    apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "lakestream: '$(CHROMIUM)' not found: the browser tests need Chromium (sudo apt-get install chromium)"; exit 1; \
	  fi; }
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { echo "lakestream: '$(CHROMIUM)' still not found after installing it; set CHROMIUM=/path/to/chromium"; exit 1; }

venv: $(STAMPS)/venv

$(STAMPS)/venv: pyproject.toml requirements-lock.txt
	@mkdir -p $(STAMPS)
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -c requirements-lock.txt -e '.[dev]'
	@touch $@

jvm: jvm/target/lakestream-jvm.jar

jvm/target/lakestream-jvm.jar: jvm/pom.xml jvm/s3proxy/pom.xml $(JAVA_SOURCES)
	mvn -q -B -f jvm/pom.xml package -DskipTests
	@touch $@

# The Java operator tests (JUnit 5 + Flink's operator harnesses), also when the jar is up to date.
jvm-test: tools
	mvn -q -B -f jvm/pom.xml test

# Benchmark-only deps (the `bench` extra: pyspark, delta-spark, confluent-kafka, psutil, py-spy) and the
# Spark connector jars (Maven profile spark-bench -> jvm/target/lib/spark); BENCH_ARGS e.g. --events 100000.
bench: bootstrap
	$(VPY) -m pip install -q -c requirements-lock.txt -e '.[bench]'
	mvn -q -B -f jvm/pom.xml -Pspark-bench package -DskipTests
	$(VPY) -m benchmarks $(BENCH_ARGS)

# Silver at production size: the silver sink alone, no Flink/Kafka, copy-on-write MERGE vs
# merge-on-read changes + fold per table size (benchmarks/silver_scale.py); BENCH_ARGS e.g.
# --orders 1000000,4000000 --minutes 3 --cow-checkpoints 5. Results in .lakestream/bench-silver/.
bench-silver: bootstrap
	$(VPY) -m benchmarks.silver_scale $(BENCH_ARGS)

# explain order at size: 10M silver orders, ~50M bronze events, before and after `maintain`'s compaction
# writes bloom filters, and the compaction's cost with and without them (benchmarks/explain_scale.py);
# BENCH_ARGS e.g. --orders 1000000 --samples 50. Results in .lakestream/bench-explain/.
bench-explain: bootstrap
	$(VPY) -m benchmarks.explain_scale $(BENCH_ARGS)

# Freshness at size: event -> readable in bronze and in silver's read path at each checkpoint interval, on
# a seeded silver with half the events updates spread over it (benchmarks/freshness.py); BENCH_ARGS e.g.
# --orders 1000000,10000000 --minutes 20 --intervals 1s. Results in .lakestream/bench-freshness/.
bench-freshness: bootstrap
	$(VPY) -m pip install -q -c requirements-lock.txt -e '.[bench]'
	$(VPY) -m benchmarks.freshness $(BENCH_ARGS)

# Where the bounded ingest spends its time: py-spy on every Python worker, CPU per process kind
# (benchmarks/profile.py; summary and raw stacks in .lakestream/bench/profile/).
profile: bootstrap
	$(VPY) -m pip install -q -c requirements-lock.txt -e '.[bench]'
	$(VPY) -m benchmarks.profile $(PROFILE_ARGS)

clean:
	-$(VPY) -m cli kafka stop
	-$(VPY) -m cli s3 stop
	rm -rf .lakestream lakehouse jvm/target
