# fedpriv — every target creates (once) and reuses the virtual environment in .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export TF_CPP_MIN_LOG_LEVEL := 3
export PYTHONUNBUFFERED := 1

.PHONY: install run test lint bench strategies clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## The main job: the default scenario on embedded data (no download).
run: $(STAMP)
	$(BIN)/fedpriv run $(if $(RUN_CONFIG),--run-config "$(RUN_CONFIG)")

## The test suite (unit tests + small seeded Flower simulations).
test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

## All six stock strategies on synthetic-mri through `flwr run .`, 2 rounds each.
strategies: $(STAMP)
	for s in fedavg fedavgm fedmedian fedprox fedopt fedyogi; do \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/flwr run . --run-config "scenario='synthetic-mri' strategy='$$s' num-server-rounds=2 output-dir='runs/strategies/$$s'" || exit 1; \
	  test -f runs/strategies/$$s/summary.json || { echo "strategy $$s: no summary.json"; exit 1; }; \
	done

bench: $(STAMP)
	$(BIN)/python bench/run_bench.py

clean:
	rm -rf runs reports .pytest_cache
