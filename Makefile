# fedpriv -- every target creates (once) and reuses the virtual environment in .venv, which
# holds the pinned simulation stack (`.[simulation,dev]` with constraints.txt: Keras 3 on
# TensorFlow-CPU 2.21 and JAX, Flower 1.42, numpy 2) on Python 3.11-3.13 (default: the first
# of python3.12, python3.13, python3.11 that runs, see scripts/find-python; `make run
# PYTHON=/path/to/python3.13` picks one).
# `make test-base-install` uses a second one, .venv-base: the base install (the wrappers, no
# Keras/TensorFlow/JAX/Ray) with the same pins.
PYTHON ?= $(shell scripts/find-python)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
UV_VERSION := 0.13.9
export TF_CPP_MIN_LOG_LEVEL := 3
export PYTHONUNBUFFERED := 1

.PHONY: install run test test-guards test-deployment test-all test-durations test-base-install
.PHONY: ci lint docs
.PHONY: notebooks
.PHONY: bench bench-peers-env bench-gpu strategies clean

## Every page under docs/results/ is written by one target below, named at the page's top with
## when and on what it ran (bench/results_page.py adds that line and copies the figures beside
## the page). Each target's *_PAGE variable says where: `make results-check` points them at a
## scratch folder. PAGE_STEP = the page writer: $(call PAGE_STEP,command,report,page,images...).
RESULTS_DIR ?= docs/results
PAGE_STEP = $(BIN)/python -m bench.results_page --command "$(1)" --report $(2) --page $(3) \
  --started $$started $(foreach i,$(4),--image $(i)) $(5)

# uv installs the ~2.5 GB stack in about a minute where pip takes several; both read PyPI.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "uv==$(UV_VERSION)"
	$(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode -c constraints.txt -e ".[simulation,dev]"
	touch $(STAMP)

install: $(STAMP)

## The main job: the default scenario on embedded data (no download, no network).
run: $(STAMP)
	$(BIN)/fedpriv run $(if $(RUN_CONFIG),--run-config "$(RUN_CONFIG)")

## The test suite (unit tests + small seeded Flower simulations) on the pinned stack, in
## PYTEST_WORKERS processes
## (pytest-xdist; whole files per worker, so a module's simulation fixture runs once; in
## collection order, which tests/conftest.py makes simulation files first:
## --no-loadscope-reorder keeps xdist from putting the files with most tests first).
## PYTEST_ARGS narrows it, e.g. make test PYTEST_ARGS="tests/test_dp_wrappers.py" PYTEST_WORKERS=0.
## Tiers (pyproject's pytest markers): `make test` skips the `slow` tests (paper-scale
## checks; the list and the reason for each is in CONTRIBUTING.md "Test tiers"); `make
## test-guards` runs the slow tests that guard a paper result or a privacy guarantee (marked
## `guard` too), which CI runs after `make test`; `make test-deployment` runs the slow tests
## of the deployment path (marked `deployment`), which CI runs next; `make test-all` runs
## everything.
## `make test-durations` is `make test-all` with the 40 slowest tests listed.
PYTEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -ra -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

test-guards: $(STAMP)
	$(PYTEST) -m "slow and guard" $(PYTEST_ARGS)

## The deployment path (marker `deployment`), one test at a time (each is a small cluster of
## real processes on 127.0.0.1; no xdist beside it), 7 tests: the example app through `flwr
## run` on Flower's own SuperLink (simulation engine, beside the user's own modules; four
## SuperNodes, then a second run stopped mid-round leaves no process), the repo's app on a
## SuperLink and four SuperNodes with one killed (global DP; HDP zone nodes, their ledgers read
## back; the killed nodes report Flower's shortest heartbeat interval, 10 s: found gone 17-20 s
## after the kill instead of 45-51 s, measured), at a load kept at 4 x cores (spinners) a run
## finishes or fails within its timeout (180 s), leaving none (process tree and a /proc scan),
## and docs/deployment.md followed (TLS and node authentication: 3 DP-SGD SuperNodes, then 2
## zone nodes), and distributed DP over five SuperNodes, one killed in its masked step
## (tests/test_deployment_distributed.py: one round; 8.5-9 min at a load of 60-80, not measured
## idle). Before these cuts: 12 min for 9 tests at a load of about 8 (16 min at 20-35);
## they take out one simulation-engine run and one federation (est. ~2 min at a load of 8) and
## ~1 min of heartbeat waits. Measured per file on the 2-core box at a load of 40-100 (seven
## other jobs; wall times there say little): test_deployment.py 836 s before, 1171 s after at a
## higher load; the example's SuperLink run 176 s, with the mid-round stop on its federation
## 253 s; the 4 x cores test 158 s (finished); at a load of ~70 the simulation-engine example
## ran past its 420 s limit before and after (it now fails in one line), the guide's DP-SGD
## run once past its 420 s in its last round; rerun at a load of 20-50 the guide passed in
## 595 s (432 s and 151 s). Every wait is bounded (the whole of CI must stay under 30 min).
DEPLOYMENT_TESTS := tests/test_example_app.py tests/test_deployment.py \
                    tests/test_deployment_cleanup.py tests/test_deployment_guide.py \
                    tests/test_deployment_distributed.py
test-deployment: $(STAMP)
	$(BIN)/python -m pytest -q -ra -m deployment $(DEPLOYMENT_TESTS) $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

test-durations: $(STAMP)
	$(PYTEST) --durations=40 $(PYTEST_ARGS)

## --- the base install ---------------------------------------------------------------------
## The wrapper and mechanism tests again in the base install (`.[test]`: Flower without Ray,
## numpy, dp-accounting; no Keras, TensorFlow, JAX or matplotlib), same pins.
## WRAPPER_TESTS must import without the simulation extra.
BASE_VENV   := .venv-base
BASE_STAMP  := $(BASE_VENV)/.installed-stamp
WRAPPER_TESTS := tests/test_dp_wrappers.py tests/test_mechanisms.py tests/test_distance.py \
                 tests/test_accounting.py tests/test_privacy_plan.py tests/test_light_install.py \
                 tests/test_distributed_encoding.py tests/test_distributed_secagg.py \
                 tests/test_distributed_accounting.py tests/test_distributed_dp.py \
                 tests/test_ledger_store.py tests/test_user_app_names.py \
                 tests/test_distributed_party.py tests/test_fork_safety.py

$(BASE_STAMP): pyproject.toml constraints.txt
	test -x $(BASE_VENV)/bin/python || $(PYTHON) -m venv $(BASE_VENV)
	$(BASE_VENV)/bin/python -m pip install -q "uv==$(UV_VERSION)"
	$(BASE_VENV)/bin/uv pip install --python $(BASE_VENV)/bin/python -q --compile-bytecode -c constraints.txt -e ".[test]"
	touch $(BASE_STAMP)

test-base-install: $(BASE_STAMP)
	$(BASE_VENV)/bin/python -c "import fedpriv.strategies.dp_wrappers, sys; assert not {'tensorflow', 'keras', 'jax', 'ray'} & set(sys.modules)"
	$(BASE_VENV)/bin/python -m pytest -q -ra $(WRAPPER_TESTS)

## What CI runs: .ci/run (the fast tier on the pinned stack; then the deployment path in the
## background, beside the slow tests that guard a result, every results page re-made at a
## reduced scale, the base install and the docs).
ci:
	PYTHON="$(PYTHON)" bash .ci/run

## Every page under docs/results/ re-made by its own target at a reduced scale into
## RESULTS_CHECK_DIR (never docs/), then the orderings and bands each page claims checked on
## that run (bench/results_check.py; claims and bands in bench/results_claims.py). Fails,
## naming the page, when a command exits non-zero, writes no page, or a claim does not hold.
## RESULTS_CHECK_PAGES="gp-fig2,dlg" runs a subset. Budget per page on 2 idle cores (reduced
## scale; estimated from each page's full-scale time and start-up ~15-20 s a simulation, as the
## shared 2-core machine ran at a load of 40-85 when this was written, where one Ray start-up
## alone took 56-225 s and runs took 5-20x their idle time):
##   gp-fig2       3 IFCA runs (k,nu) = (1,0) (2,0) (2,5), seed 0        ~40 s (272 s at load 40)
##   ifca-table    nu in {0, 15}, 6 rounds                                ~40 s (409 s at load 45)
##   dlg-report    2 images, nu in {0.01, 10}, 1 zonal group, 100 iters   ~30 s (600 s at load 60)
##   hdp-compare   none/LDP/HDP/CDP, 8 rounds                             ~50 s
##   hdp-sweep     s in {1, 10}, 8 rounds                                 ~35 s
##   hdp-paper     k = 100, 10 rounds                                     ~35 s
##   cia-table     FedAvg x {none, global DP}, 3 local epochs             ~70 s
##   mp-grid       FedAvg x {none, global DP}, seed 0, 1 round            ~60 s
##   privacy-util  eps = 8, seed 0, 3 rounds (7 cells)                    ~120 s
##   audit-report  z = 3, 1 round (5 cells + mechanism audits)            ~90 s
##   distributed-dp-utility  eps = 8, seed 0, 3 rounds (3 cells, 2 sims)  ~120 s
##   total                                                               ~11 min
## `python -m bench.results_check` prints each page's wall and CPU seconds.
RESULTS_CHECK_DIR ?= runs/results-check
RESULTS_CHECK_PAGES ?=
.PHONY: results-check
results-check: $(STAMP)
	rm -rf $(RESULTS_CHECK_DIR)
	$(BIN)/python -m bench.results_check --out $(RESULTS_CHECK_DIR) --make "$(MAKE)" \
	  $(if $(RESULTS_CHECK_PAGES),--pages $(RESULTS_CHECK_PAGES))

## The documentation site (docs/: Sphinx + MyST, the `docs` extra, in `dev` too) with warnings
## as errors; the key reference and the API reference are generated -> docs/_build/html. Then
## every image under docs/results/ must be shown by a built page (scripts/check_site_images.py).
docs: $(STAMP) notebooks
	PYTHONPATH=$(CURDIR) $(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html
	$(BIN)/python scripts/check_site_images.py docs/results docs/_build/html

## The example notebooks (examples/notebooks/*.ipynb), each run top to bottom in a fresh
## kernel by nbmake (the `dev` extra); each trains a small scenario (about a minute on 2
## cores). CI runs them with the docs.
notebooks: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider --nbmake --nbmake-timeout=600 examples/notebooks

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

## All six stock strategies on synthetic-mri through `fedpriv run`, 2 rounds each.
strategies: $(STAMP)
	for s in fedavg fedavgm fedmedian fedprox fedopt fedyogi; do \
	  $(BIN)/fedpriv run --run-config "scenario='synthetic-mri' strategy='$$s' num-server-rounds=2 output-dir='runs/strategies/$$s'" || exit 1; \
	  test -f runs/strategies/$$s/summary.json || { echo "strategy $$s: no summary.json"; exit 1; }; \
	done

bench: $(STAMP)
	$(BIN)/python bench/run_bench.py

## The peers' own environment for `make bench`'s peers row (bench/bench_peers.py): pfl 0.6.0
## (PyPI `pfl`, the pfl-research project) with TensorFlow and tf-keras, in .venv-peers. pfl pins
## dp-accounting < 0.6 (our .venv has 0.6.0) and Python < 3.13, so it never goes into .venv.
## Without it the pfl cells of the row say "skipped: ...".
PEERS_VENV  := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
$(PEERS_STAMP): $(STAMP)
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(BIN)/uv pip install --python $(PEERS_VENV)/bin/python -q "pfl[tf]==0.6.0" \
	  "tensorflow==2.21.*" "tf-keras==2.21.*"
	touch $(PEERS_STAMP)

bench-peers-env: $(PEERS_STAMP)

## On the JAX backend: one MP run (synthetic-mri, 20 rounds x 5 epochs) and the 180-run MP
## grid on local-simulation-gpu against plain Keras on the same GPU -> bench/results-gpu.md.
## Needs a CUDA host with `pip install -e ".[simulation,gpu]"` (jax[cuda13]); exits 2 with
## one line when no GPU is visible. BENCH_GPU_ARGS="--no-grid" or "--seeds 0" to shorten.
bench-gpu: $(STAMP)
	KERAS_BACKEND=jax $(BIN)/python bench/bench_gpu.py $(BENCH_GPU_ARGS)

clean:
	rm -rf runs reports .pytest_cache docs/_build docs/reference/_autosummary

## --- MP grid -----------------------------------------------------------------------------
## `fedpriv grid` runs every strategy x privacy x seed cell as its own simulation into
## runs/<grid>/<strategy>/<privacy>/seed<k>/, skips complete cells (re-running resumes),
## and exits 1 if a cell failed; `fedpriv report` writes runs/<grid>/report.md + plots/.
MP_STRATEGIES ?= fedavg,fedavgm,fedmedian,fedprox,fedopt,fedyogi
MP_PRIVACY    ?= none,global-dp,metric-dp
MP_SEEDS      ?= 0,1
MP_GRID_DIR   ?= runs/mp-grid-synthetic
MP_GRID_PAGE  ?= $(RESULTS_DIR)/mp-grid-synthetic.md

## 6 strategies x {vanilla, global-DP, metric-DP} x 2 seeds on synthetic-mri, short rounds:
## 36 simulations, a pipeline check (not MP's numbers). MP_GRID_RUN_CONFIG to change rounds.
## -> docs/results/mp-grid-synthetic.md.
MP_GRID_RUN_CONFIG ?= num-server-rounds=3 local-epochs=1
mp-grid-synthetic: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv grid --scenario synthetic-mri --strategies $(MP_STRATEGIES) \
	  --privacy $(MP_PRIVACY) --seeds $(MP_SEEDS) --output-dir $(MP_GRID_DIR) \
	  --run-config "$(MP_GRID_RUN_CONFIG)"; status=$$?; \
	$(BIN)/fedpriv report $(MP_GRID_DIR) && \
	$(call PAGE_STEP,make mp-grid-synthetic,$(MP_GRID_DIR)/report.md,$(MP_GRID_PAGE)) \
	  || status=1; exit $$status

## The full MP grid on the real Alzheimer MRI data (MP §7: 20 rounds, 5 local epochs, Adam
## 1e-3, batch 32, z = 0.01, C = 5 -- the scenario and key defaults), 5 seeds, homogeneous
## and non-IID clients (MP Tables 4-7):
##   make mp-grid-alzheimer DATA=/path/to/Alzheimer_MRI   (image folder or parquet)
## 2 x 90 simulations: hours on a CPU; add FEDERATION=local-simulation-gpu on a GPU host.
FEDERATION ?= local-simulation
mp-grid-alzheimer: $(STAMP)
	@test -n "$(DATA)" || { echo "usage: make mp-grid-alzheimer DATA=/path/to/alzheimer"; exit 2; }
	status=0; for part in homogeneous non-iid; do \
	  $(BIN)/fedpriv grid --scenario alzheimer --strategies $(MP_STRATEGIES) \
	    --privacy $(MP_PRIVACY) --seeds 0,1,2,3,4 --federation $(FEDERATION) \
	    --output-dir runs/mp-grid-alzheimer/$$part \
	    --run-config "data-path='$(DATA)' partition='$$part'" || status=1; \
	  $(BIN)/fedpriv report runs/mp-grid-alzheimer/$$part; \
	done; exit $$status

.PHONY: mp-grid-synthetic mp-grid-alzheimer

## --- attacks --------------------------------------------------------------------------------
## The client inference attack on synthetic-mri (MP §7.4, Tables 9-11 and D.13-D.16 shapes):
## 6 strategies x {vanilla, global-DP, metric-DP} = 18 simulations of the `cia` scenario (1 round
## of 20 local epochs, plus the same round with the target absent), then reports/cia/cia.md and
## cia_auc.png. CIA_RUN_CONFIG adds overrides, e.g. "num-server-rounds=3" for AUC over rounds.
## -> docs/results/cia-synthetic-mri.md and .png.
CIA_RUN_CONFIG ?=
CIA_STRATEGIES ?= fedavg,fedavgm,fedmedian,fedprox,fedopt,fedyogi
CIA_PRIVACY ?= none,global-dp,metric-dp
CIA_RUNS ?= runs/cia
CIA_OUT ?= reports/cia
CIA_PAGE ?= $(RESULTS_DIR)/cia-synthetic-mri.md
cia-table: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv attack cia --scenario cia --strategies $(CIA_STRATEGIES) \
	  --privacy $(CIA_PRIVACY) --runs-root $(CIA_RUNS) --out $(CIA_OUT) \
	  $(if $(CIA_RUN_CONFIG),--run-config "$(CIA_RUN_CONFIG)") && \
	$(call PAGE_STEP,make cia-table,$(CIA_OUT)/cia.md,$(CIA_PAGE),$(CIA_OUT)/cia_auc.png=cia-synthetic-mri.png)

## DLG reconstructions on digits: no defence, Laplace sanitization at nu in {0.001 .. 10}
## (GP Fig. 5) and a level-0 adversary against LDP / HDP / CDP / no DP (HDP Table IV shape).
## -> docs/results/dlg.md, dlg_laplace.png, dlg_zonal.png. DLG_ARGS: e.g. "--images 2".
DLG_OUT ?= reports/dlg
DLG_ARGS ?=
DLG_PAGE ?= $(RESULTS_DIR)/dlg.md
dlg-report: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv attack dlg --out $(DLG_OUT) $(DLG_ARGS) && \
	$(call PAGE_STEP,make dlg-report,$(DLG_OUT)/dlg.md,$(DLG_PAGE),$(DLG_OUT)/dlg_laplace.png $(DLG_OUT)/dlg_zonal.png)

.PHONY: cia-table dlg-report

## GP Table 2 shape on embedded data: digits-rotated (k = 2) accuracy against the IFCA noise
## multiplier nu, every (seed, nu) run in ONE simulation (ifca-sweep); table in ifca_table.md.
IFCA_NUS ?= 0 0.001 0.01 0.1 1 3 5 10 15
IFCA_SEEDS ?= 0
IFCA_TABLE_DIR ?= runs/ifca-table
IFCA_RUN_CONFIG ?=
IFCA_PAGE ?= $(RESULTS_DIR)/ifca-digits-rotated-table.md
.PHONY: ifca-table
ifca-table: $(STAMP)
	started=$$(date +%s); sweep=""; for s in $(IFCA_SEEDS); do for nu in $(IFCA_NUS); do \
	  sweep="$$sweep$${sweep:+;}ifca-noise-multiplier=$$nu,seed=$$s"; done; done; \
	$(BIN)/fedpriv run --run-config "scenario='digits-rotated' output-dir='$(IFCA_TABLE_DIR)' ifca-sweep='$$sweep'" \
	  $(if $(IFCA_RUN_CONFIG),--run-config "$(IFCA_RUN_CONFIG)") \
	  && cat $(IFCA_TABLE_DIR)/ifca_table.md && \
	$(call PAGE_STEP,make ifca-table,$(IFCA_TABLE_DIR)/ifca_table.md,$(IFCA_PAGE),,--title \
	  "IFCA on digits-rotated: accuracy against the noise multiplier ν (GP Table 2 shape)")

## HDP Fig. 2 + Table III on digits (scenario hdp-digits: 100 clients, 10 zones, 20 per round):
## none / LDP / HDP / CDP at the same z in ONE simulation -> reports/hdp-compare/report.md
## (accuracy per round, epsilon at the aggregator) and comparison.png.
## -> docs/results/hdp-compare.md and .png.
HDP_COMPARE_DIR ?= reports/hdp-compare
HDP_COMPARE_PAGE ?= $(RESULTS_DIR)/hdp-compare.md
HDP_SWEEP_DIR ?= reports/hdp-sweep
HDP_SWEEP_PAGE ?= $(RESULTS_DIR)/hdp-sweep.md
HDP_SWEEP_ZONES ?= 1,2,5,10,20
HDP_SWEEP_ROUNDS ?= 20
.PHONY: hdp-compare hdp-sweep hdp-paper
hdp-compare: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv run --run-config "scenario='hdp-digits' output-dir='$(HDP_COMPARE_DIR)'" \
	  $(if $(HDP_RUN_CONFIG),--run-config "$(HDP_RUN_CONFIG)") \
	  && cat $(HDP_COMPARE_DIR)/report.md && \
	$(call PAGE_STEP,make hdp-compare,$(HDP_COMPARE_DIR)/report.md,$(HDP_COMPARE_PAGE),$(HDP_COMPARE_DIR)/comparison.png=hdp-compare.png,--title "Zonal (hierarchical) FL with DP: hdp-digits")

## HDP Fig. 2 + Table III at the paper's k = 100, s = 10, 200 rounds (scenario hdp-paper, zone
## SuperNodes; about 5 min on 2 idle cores) -> docs/results/hdp-paper.md and .png; the page's
## reading of the run (bench/pages/hdp-paper.md) is appended after the run's report.
HDP_PAPER_DIR ?= reports/hdp-paper
HDP_PAPER_PAGE ?= $(RESULTS_DIR)/hdp-paper.md
hdp-paper: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv run --run-config "scenario='hdp-paper' output-dir='$(HDP_PAPER_DIR)'" \
	  $(if $(HDP_PAPER_RUN_CONFIG),--run-config "$(HDP_PAPER_RUN_CONFIG)") && \
	cat $(HDP_PAPER_DIR)/report.md bench/pages/hdp-paper.md > $(HDP_PAPER_DIR)/page.md && \
	$(call PAGE_STEP,make hdp-paper,$(HDP_PAPER_DIR)/page.md,$(HDP_PAPER_PAGE),$(HDP_PAPER_DIR)/comparison.png=hdp-paper.png,--title "hdp-paper: HDP Fig. 2 / Table III at the paper's own scale")

## GP Fig. 2 shape (scenario gp-fig2: k in {1,2,3,5,7} x nu in {0,1,2,3,5} x 10 seeds, 250
## IFCA runs in one simulation) -> docs/results/gp-fig2.md and .png (bench/gp_fig2_page.py).
## GP_FIG2_RUN_CONFIG adds overrides, e.g. "ifca-sweep='num-hypotheses=2,seed=0'".
GP_FIG2_DIR ?= reports/gp-fig2
GP_FIG2_PAGE ?= $(RESULTS_DIR)/gp-fig2.md
.PHONY: gp-fig2
gp-fig2: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv run --run-config "scenario='gp-fig2' output-dir='$(GP_FIG2_DIR)'" \
	  $(if $(GP_FIG2_RUN_CONFIG),--run-config "$(GP_FIG2_RUN_CONFIG)") && \
	$(BIN)/python -m bench.gp_fig2_page $(GP_FIG2_DIR) --page $(GP_FIG2_PAGE) --started $$started

## Privacy-utility figure: final accuracy against the target epsilon in {1,2,4,8} for fixed
## clipping, adaptive clipping, DP-FTRL, client budgets and DP-FedAvg without amplification on
## digits with 100 clients (z per cell from the planner; bench/privacy_utility.py), then
## the page docs/results/privacy-utility.md and its plot. Complete cells are skipped.
PU_DIR ?= reports/privacy-utility
PU_EPSILONS ?= 2,4,8
PU_SEEDS ?= 0,1,2
PU_ROUNDS ?= 20
PU_PAGE ?= $(RESULTS_DIR)/privacy-utility.md
.PHONY: privacy-utility
privacy-utility: $(STAMP)
	$(BIN)/python -m bench.privacy_utility --out $(PU_DIR) --epsilons $(PU_EPSILONS) \
	  --seeds $(PU_SEEDS) --rounds $(PU_ROUNDS)
	$(BIN)/python -m bench.privacy_utility_page $(PU_DIR) \
	  --page $(PU_PAGE) --plot $(PU_PAGE:.md=.png)

## Distributed DP's utility: distributed-dp at 16 bits against central global-dp
## and LDP at the same target epsilon (2, 4, 8), seeds 0-2, on the privacy-utility setting
## (bench/distributed_utility.py; z per cell from the planner), then the page
## docs/results/distributed-dp-utility.md and its plot. Complete cells are skipped.
DDPU_DIR ?= reports/distributed-dp-utility
DDPU_EPSILONS ?= 2,4,8
DDPU_SEEDS ?= 0,1,2
DDPU_ROUNDS ?= 20
DDPU_PAGE ?= $(RESULTS_DIR)/distributed-dp-utility.md
.PHONY: distributed-dp-utility
distributed-dp-utility: $(STAMP)
	$(BIN)/python -m bench.distributed_utility --out $(DDPU_DIR) --epsilons $(DDPU_EPSILONS) \
	  --seeds $(DDPU_SEEDS) --rounds $(DDPU_ROUNDS)
	$(BIN)/python -m bench.distributed_utility_page $(DDPU_DIR) \
	  --page $(DDPU_PAGE) --plot $(DDPU_PAGE:.md=.png)

## HDP Fig. 3 shape: HDP accuracy against epsilon at the aggregator as the number of zones s
## varies (one simulation) -> reports/hdp-sweep/report.md and sweep.png -> docs/results/hdp-sweep.md
## and hdp-sweep.png.
hdp-sweep: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv run --run-config "scenario='hdp-digits' zonal-compare-placements='hdp' \
	  zonal-sweep-zones='$(HDP_SWEEP_ZONES)' num-server-rounds=$(HDP_SWEEP_ROUNDS) \
	  output-dir='$(HDP_SWEEP_DIR)'" $(if $(HDP_RUN_CONFIG),--run-config "$(HDP_RUN_CONFIG)") \
	  && cat $(HDP_SWEEP_DIR)/report.md && \
	$(call PAGE_STEP,make hdp-sweep,$(HDP_SWEEP_DIR)/report.md,$(HDP_SWEEP_PAGE),$(HDP_SWEEP_DIR)/sweep.png=hdp-sweep.png,--title "Zonal (hierarchical) FL with DP: hdp-digits with the zones swept")

## The canary audit page (docs/results/audit/audit.md and audit_epsilon_vs_z.png): none / global
## DP / metric DP (raw, clipped) on digits at each z, one DP-SGD cell and the mechanism-level
## audits (`fedpriv audit --grid`, ~30 min on 2 cores); the page's reading of the run
## (bench/pages/audit.md) is appended after the generated report.
AUDIT_DIR ?= reports/audit
AUDIT_Z ?= 0.01 0.3 3
AUDIT_RUN_CONFIG ?= num-server-rounds=4
AUDIT_PAGE ?= $(RESULTS_DIR)/audit/audit.md
.PHONY: audit-report
audit-report: $(STAMP)
	started=$$(date +%s); \
	$(BIN)/fedpriv audit --grid --z $(AUDIT_Z) --out $(AUDIT_DIR) --run-config "$(AUDIT_RUN_CONFIG)" && \
	cat $(AUDIT_DIR)/audit.md bench/pages/audit.md > $(AUDIT_DIR)/page.md && \
	$(call PAGE_STEP,make audit-report,$(AUDIT_DIR)/page.md,$(AUDIT_PAGE),$(AUDIT_DIR)/audit_epsilon_vs_z.png)
