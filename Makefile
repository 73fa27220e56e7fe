# torchyard: every install step lives here. `make up` starts it, `make test` tests it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
POSTGRES_URL ?= postgresql+psycopg://postgres@127.0.0.1:5432/test
REDIS_URL ?= redis://127.0.0.1:6379/0

.PHONY: install up test test-embedded test-services lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# Without an NVIDIA GPU, take the CPU build of torch first: a bare requirement would pull
	# a multi-GB CUDA build.
	if ! command -v nvidia-smi >/dev/null 2>&1; then $(PIP) install -q "torch==2.13.0"; fi
	$(PIP) install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

up: install
	$(VENV)/bin/torchyard up

lint: install
	$(VENV)/bin/ruff check app worker tests bench migrations
	$(VENV)/bin/ruff format --check app worker tests bench migrations
	$(VENV)/bin/mypy

# The whole suite twice: on the embedded defaults (SQLite database and SQLite broker), then on
# PostgreSQL + Redis. Neither is skipped: an unreachable service fails the run.
test: lint test-embedded test-services

# The metrics store's own tests run on both databases in both passes.
export TORCHYARD_TEST_POSTGRES_URL ?= $(POSTGRES_URL)

test-embedded: install
	env -u TORCHYARD_DATABASE_URL -u TORCHYARD_BROKER_URL $(PY) -m pytest -q

test-services: install
	TORCHYARD_DATABASE_URL=$(POSTGRES_URL) TORCHYARD_BROKER_URL=$(REDIS_URL) \
		$(PY) -m pytest -q

bench: install
	$(PY) bench/log_overhead.py
	$(PY) bench/ingest.py
	$(PY) bench/launch_latency.py

clean:
	rm -rf $(VENV) torchyard-data
