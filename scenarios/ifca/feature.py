"""Feature ``ifca``: scenarios, keys and runner (GP Algorithms 1–2; SPEC §3.4, §5).

The client side is :mod:`fedpriv.clients.ifca_client` (task ``ifca`` and its message type).

Scenarios (kind ``ifca``):

- ``gp-synthetic`` — GP §4.1 / extended §5.1: linear model, k = 2, ν = 5, U = 7, SGD step
  0.1, B = 10, E = 1, 100 training users × 10 samples + 20 held-out validation users,
  patience 6, <= 50 rounds (GP gives no T; its max leakage 2.4 = 6 × 0.4 implies tens).
- ``digits-rotated`` — GP §4.3 / Table 2 on embedded data: scikit-learn digits, each client
  rotated by 90° with probability 1/2, ``digits-mlp``, k = 2, accuracy against ν
  (``make ifca-table`` sweeps ν ∈ {0, 0.001, 0.01, 0.1, 1, 3, 5, 10, 15}).

Run layout: the last ``validation-clients`` partition ids are the held-out validation users,
the others train. ``ifca-sweep`` runs several configurations in ONE simulation (same
SuperNodes; each client keeps ONE ledger across the sweep's runs, :mod:`fedpriv.privacy.releases`:
the cells release the same data, so their leakage adds up), each in
``output-dir/sweep-NN/``, plus a summary and ``ifca_table.md`` in ``output-dir``.

Resume: every run checkpoints after each round (``checkpoint.pkl``: hypotheses,
server Generator, mirror ledger, early stopping, best hypotheses; ``fedpriv.scenarios.app.resume``)
and
its clients keep their own ledgers in their own state directories (``fedpriv.clients.ifca_client``,
:mod:`fedpriv.privacy.releases`: ``output-dir/client-state/`` when the run config names the output
dir); the same command continues a killed run, and a sweep skips its complete runs.

Outputs of one run: ``rounds.jsonl`` (per round: sampled users, participants, declines,
failures, cluster sizes, server-side assignment, hypotheses and released vectors for models
with <= 16 parameters, mirror-ledger stats, validation metrics, best round), ``summary.json``
(best hypotheses, per-client leakage, participations, each training user's test accuracy
with its best hypothesis — an opt-in, see ``fedpriv.privacy.disclosure`` — distances to θ*) and
plots (leakage histogram, 2-param scatter, leakage per cluster, validation loss).

Notes (choices and measurements):

- Users train on the model's loss (MSE for ``linear``, else cross-entropy); early stopping
  uses GP Eq. 10's RMSE (regression) or the cross-entropy. Validation users (never trained)
  choose and measure on all their data; training users, in the final report, choose on their
  training split and are measured on their test split (gp-synthetic: 8 + 2 of 10 samples,
  ``fedpriv.data.gp_synthetic``; GP trains on all 10).
- Initial hypotheses: N(0, 1) per parameter for ``linear`` (GP §5.1); k seeded Keras inits
  otherwise (GP does not say; on digits-rotated they split users by rotation in a few rounds).
- GP reports convergence to θ* at ν = 5 on the synthetic data. With this data (x ~ N(0, I),
  not given in GP), SGD step 0.1 on the MSE and U = 7, the released noise has mean norm
  ν‖δ‖ = 5‖δ‖ and, averaged over the ~3.5 members of a cluster, it outweighs the per-round
  progress 0.2·‖θ − θ*‖: in a numpy re-implementation of the same algorithm (12 seeds,
  patience 6), both hypotheses end within 0.5 of θ* in 12/12 runs at ν = 1, 10/12 at ν = 2,
  5/12 at ν = 3 and 0/12 at ν = 5 (the hypotheses random-walk; k = 1 too). Training on the
  RMSE (GP Eq. 10) bounds the step to ~0.1 per round: about 70 rounds from the N(0, 1)
  start, and at ν = 5 a stationary spread of ~0.6 around θ*. The scenario keeps GP's ν = 5.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from fedpriv.scenarios.app import multirun
from fedpriv.scenarios.app.task_names import IFCA_TASK
from fedpriv.scenarios.app.wire_config import wire_config
from fedpriv.scenarios.config.feature import Catalog, Feature, Scenario
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.scenarios.ifca.keys import (  # noqa: F401  (parse_sweep: re-exported)
    KEYS,
    SWEEP_FORBIDDEN,
    parse_sweep,
    sweep_overrides,
)

from fedpriv import seeds
from fedpriv.data import FederatedData
from fedpriv.ifca import METRICS_KEY, gaussian_hypotheses
from fedpriv.privacy.disclosure import GP_FINAL_EVALUATION, sends_unaccounted
from fedpriv.reporting.console import round_line
from fedpriv.reporting.runlog import RunLog, read_rounds
from fedpriv.spec import RunSpec

if TYPE_CHECKING:
    from fedpriv.scenarios.nodes.federation import PartitionGrid
    from fedpriv.strategies.ifca import LaplaceIFCA
    from flwr.app import ConfigRecord
    from flwr.serverapp import Grid

# The Keras clients, models, plots and the IFCA strategy (the ``simulation`` extra) are
# imported inside the functions that run, so that the feature list imports in the base install.

KIND = "ifca"
TABLE_NUS = (0, 0.001, 0.01, 0.1, 1, 3, 5, 10, 15)

SCENARIOS = (
    Scenario(
        "gp-synthetic",
        KIND,
        "GP synthetic linear regression (k = 2 clusters, theta* = [5, 6] and [4, -4.5]): "
        "Laplace-sanitizing IFCA, nu = 5, U = 7, 100 users + 20 validation users.",
        {
            "dataset": "gp-synthetic",
            "partition": "gp-clusters",
            "model": "linear",
            "num-clients": 120,
            "validation-clients": 20,
            "num-hypotheses": 2,
            "ifca-noise-multiplier": 5.0,
            "users-per-round": 7,
            "leakage-budget": 0.0,
            "optimizer": "sgd",
            "learning-rate": 0.1,
            "batch-size": 10,
            "local-epochs": 1,
            "patience": 6,
            "num-server-rounds": 50,
            "strategy": "fedavg",
            "privacy": "none",
            **GP_FINAL_EVALUATION,
        },
    ),
    Scenario(
        "digits-rotated",
        KIND,
        "Digits, half the clients rotated by 90 degrees (GP FEMNIST protocol): IFCA with "
        "k = 2 hypotheses, digits-mlp; sweep ifca-noise-multiplier for GP Table 2.",
        {
            "dataset": "digits",
            "partition": "rotation",
            "model": "digits-mlp",
            "num-clients": 24,
            "validation-clients": 4,
            "num-hypotheses": 2,
            "ifca-noise-multiplier": 0.0,
            "users-per-round": 10,
            "leakage-budget": 0.0,
            "optimizer": "sgd",
            "learning-rate": 0.2,
            "batch-size": 16,
            "local-epochs": 2,
            "patience": 6,
            "num-server-rounds": 30,
            "strategy": "fedavg",
            "privacy": "none",
            **GP_FINAL_EVALUATION,
        },
    ),
)


# --- config checks and sweeps -------------------------------------------------------------


def sweep_configs(
    cfg: Mapping[str, Any], catalog: Catalog
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``[(overrides, resolved sub-config)]`` of ``ifca-sweep`` ([] when it is '')."""
    allowed = "'key=value,...;key=value,...' with known keys other than " + ", ".join(
        SWEEP_FORBIDDEN
    )
    try:
        runs = parse_sweep(cfg["ifca-sweep"]) if cfg["ifca-sweep"] else []
        bases = sweep_overrides(cfg)
    except ValueError as err:
        raise ConfigError("ifca-sweep", cfg["ifca-sweep"], allowed) from err
    return [(o, catalog.resolve_run_config(b)) for o, b in zip(runs, bases)]


def check_ifca(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Cross-key checks of an IFCA run (no-op for other kinds)."""
    if catalog.kind(cfg) != KIND:
        return
    n, v, u = int(cfg["num-clients"]), int(cfg["validation-clients"]), int(cfg["users-per-round"])
    if v >= n:
        raise ConfigError("validation-clients", v, f"an integer < num-clients ({n})")
    if u > n - v:
        raise ConfigError(
            "users-per-round", u, f"<= num-clients - validation-clients ({n} - {v} = {n - v})"
        )
    if cfg["leakage-budget"] > 0 and cfg["ifca-noise-multiplier"] == 0:
        raise ConfigError(
            "leakage-budget",
            cfg["leakage-budget"],
            "0 when ifca-noise-multiplier = 0 (no sanitization: no finite leakage to budget)",
        )
    sweep_configs(cfg, catalog)


# --- one run --------------------------------------------------------------------------------


def initial_hypotheses(run: ServerRun, data: FederatedData) -> list[list[np.ndarray]]:
    """θ_j^(0): GP §5.1's N(0, 1) per parameter for the linear model; k independently
    seeded Keras initialisations otherwise (hypothesis 0 = the standard run's initial model).
    """
    from fedpriv.clients.keras_client import initial_weights  # the simulation extra: at run time

    from fedpriv.models import build_model

    train = run.spec.train
    k, seed = int(run.record["num-hypotheses"]), int(run.spec.seed)
    template = initial_weights(train, data)
    if train.model == "linear":
        return gaussian_hypotheses(template, k, seeds.stream(seed, "ifca-init"))
    out = [template]
    for j in range(1, k):
        model = build_model(
            train.model,
            input_shape=tuple(data.input_shape),
            num_classes=data.num_classes,
            seed=seeds.derive_seed(seed, "ifca-init-model", j),
        )
        out.append([w.copy() for w in model.get_weights()])
    return out


def config_record(cfg: Mapping[str, Any], tag: str) -> ConfigRecord:
    """What the IFCA messages carry of the config: the keys that differ from the run's
    ``run_config`` plus its digest (:func:`fedpriv.scenarios.app.wire_config.wire_config`, as the
    standard
    path), with the client task and the sweep's ledger tag (a label only: the clients keep
    one ledger each, in their own state directories, ``fedpriv.clients.ifca_client``)."""
    from flwr.app import ConfigRecord

    return ConfigRecord(
        {
            **wire_config(cfg),
            "client-task": KIND,
            "ifca-ledger-tag": tag,
        }
    )


def final_evaluation(
    grid: PartitionGrid, strategy: LaplaceIFCA, best, spec: RunSpec, config: ConfigRecord
) -> tuple[Optional[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Training users pick their best hypothesis (training split) and report test metrics —
    only with ``unaccounted-metrics = true`` in the run's spec (``config``, the record sent,
    holds only what differs from ``run_config``). Returns (summary, rows) |
    (None, {}); the summary's ``declined`` counts the users whose own opt-in is off (each node
    decides its own, so a scenario's opt-in alone gets empty replies)."""
    from fedpriv.strategies.ifca import EVALUATE_TYPE, checked_validation, summarise_evaluation

    if not sends_unaccounted(spec.mode_name, opted_in=spec.unaccounted_metrics):
        return None, {}
    messages = strategy.make_messages(
        strategy.train_partitions,
        best,
        config,
        EVALUATE_TYPE,
        strategy.rounds_run + 1,
        {"ifca-eval-split": "test"},
    )
    replies = grid.send_and_receive(messages)
    answered, invalid = checked_validation(replies, strategy.k)
    rows = {str(grid.partition_of(r)): dict(r.content[METRICS_KEY]) for r in answered}
    final = summarise_evaluation(answered, strategy.k) or {"clients": 0}
    if invalid:
        final["invalid"] = invalid
    # a node decides its own opt-in (fedpriv.privacy.ownership.NODE_SECURE_DEFAULTS): one that
    # leaves
    # unaccounted-metrics unset answers with an empty reply, counted here, not read
    final["declined"] = len(replies) - len(answered) - len(invalid)
    return final, rows


def run_one(
    grid: PartitionGrid,
    run: ServerRun,
    *,
    tag: str = "",
    sink: Optional[Callable[[dict[str, Any]], None]] = None,
) -> dict[str, Any]:
    """One IFCA run on an already discovered federation; writes its outputs, returns the
    summary. Resumable: a checkpoint after every round (``fedpriv.scenarios.app.resume``); a killed
    run
    of this config continues after its last completed round."""
    from fedpriv.clients.partitions import federated_data
    from fedpriv.scenarios.app.engine import RoundState
    from fedpriv.scenarios.app.resume import checkpoint_hook, keyed_arrays, load_resumable, restore
    from fedpriv.scenarios.app.startup import data_loaded, run_times
    from fedpriv.scenarios.ifca.outputs import build_summary
    from fedpriv.scenarios.nodes.federation import supernodes
    from fedpriv.strategies.ifca import LaplaceIFCA, hypotheses_record

    t0 = time.time()
    cfg, spec = run.record, run.spec  # the record: IFCA's own keys
    checkpoint = load_resumable(run)
    done = int(checkpoint["round"]) if checkpoint is not None else 0
    runlog = RunLog(
        spec.output_dir,
        keep_rounds=done if checkpoint is not None else None,
        labels=seeds.noise_labels(spec.reproducible_noise),
    )
    data = federated_data(spec.data)
    data_loaded(spec, data)
    n_clients, n_val = spec.participation.population, int(cfg["validation-clients"])
    rounds: list[dict[str, Any]] = read_rounds(spec.output_dir) if done else []
    for record in rounds if sink is not None else ():
        sink(record)  # the sweep's combined log gets the rounds run before the kill

    def on_round_end(record: dict[str, Any]) -> None:
        rounds.append(record)
        runlog.append_round(record)
        total = int(spec.rounds)
        print(round_line(record, total, float(record.get("seconds", 0.0))), flush=True)
        if sink is not None:
            sink(record)

    strategy = LaplaceIFCA(
        num_hypotheses=int(cfg["num-hypotheses"]),
        users_per_round=int(cfg["users-per-round"]),
        train_partitions=range(n_clients - n_val),
        validation_partitions=range(n_clients - n_val, n_clients),
        node_of_partition=grid.partition_to_node,
        noise_multiplier=float(cfg["ifca-noise-multiplier"]),
        leakage_budget=float(cfg["leakage-budget"]),
        patience=int(cfg["patience"]),
        # users per round: seeded even without reproducible-noise (not privacy noise: the
        # Laplace noise is the clients' own, and no amplification by sampling is claimed)
        rng=seeds.stream(int(spec.seed), "ifca-server"),
        on_round_end=on_round_end,
    )
    initial = hypotheses_record(initial_hypotheses(run, data))
    if checkpoint is not None:
        restore(strategy, checkpoint)
        initial = keyed_arrays(checkpoint, initial)
    save = checkpoint_hook(run)
    config = config_record(cfg, tag)
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=int(spec.rounds),
        train_config=config,
        evaluate_config=config,
        first_round=done + 1,
        after_round=(lambda r, arrays: save(RoundState(r, arrays, {}, strategy)),),
    )
    final, per_client = final_evaluation(grid, strategy, result.arrays, spec, config)
    summary = build_summary(run, data, strategy, result.arrays, final, per_client, rounds)
    summary.update(run_times(t0))  # wall_seconds: the whole run, start-up included
    summary["supernodes"] = supernodes(grid)
    runlog.write_summary(summary)
    from fedpriv.reporting.ifca_plots import run_title, write_run_plots

    nu, k = float(cfg["ifca-noise-multiplier"]), int(cfg["num-hypotheses"])
    write_run_plots(
        run_title(spec.scenario, k, nu, int(spec.seed)), rounds, summary, runlog.dir,
        theta_star=data.info.get("theta_star"),
        per_participation=strategy.leakage_per_participation(), best_round=strategy.best_round,
    )  # fmt: skip
    return summary


# --- the runner -------------------------------------------------------------------------------


def run_ifca(grid: Grid, run: ServerRun, catalog: Catalog) -> None:
    """Runner of kind ``ifca``: one run, or every run of ``ifca-sweep`` in this simulation."""
    from fedpriv.scenarios.ifca.outputs import sweep_table
    from fedpriv.scenarios.nodes.virtual_grid import discover_federation

    t0 = time.time()
    cfg, spec = run.record, run.spec
    pgrid = discover_federation(grid, run)  # one SuperNode per client, or worker SuperNodes
    sweep = sweep_configs(cfg, catalog)
    if not sweep:
        run_one(pgrid, run)
        return
    runlog = RunLog(spec.output_dir, labels=seeds.noise_labels(spec.reproducible_noise))
    cells = [multirun.Cell(f"sweep-{i:02d}", sub) for i, (_, sub) in enumerate(sweep)]

    def run_cell(cell: multirun.Cell) -> dict[str, Any]:
        i = cells.index(cell)

        def sink(record: dict[str, Any]) -> None:
            runlog.append_round({"sweep-index": i, **record})

        return run_one(pgrid, run.variant(cell.cfg), tag=str(i), sink=sink)

    def done_before(cell: multirun.Cell) -> bool:  # resume: keep a complete run, re-log it
        if not multirun.summary_complete(cell):
            return False
        for record in read_rounds(cell.cfg["output-dir"]):
            runlog.append_round({"sweep-index": cells.index(cell), **record})
        return True

    rows = multirun.run_cells(cells, run_cell, is_complete=done_before, prefix="fedpriv ifca")
    results = [
        (o, multirun.result_or_summary(row, cell)) for (o, _), row, cell in zip(sweep, rows, cells)
    ]
    table = sweep_table(results)
    (runlog.dir / "ifca_table.md").write_text(table)
    runlog.write_summary(
        {
            "scenario": spec.scenario,
            "kind": KIND,
            "seed": spec.seed,
            "config": dict(cfg),
            "final": {str(i): s["final"] for i, (_, s) in enumerate(results)},
            "sweep": [
                {
                    "index": i,
                    "overrides": o,
                    "output-dir": s["config"]["output-dir"],
                    "final": s["final"],
                    "best_round": s["best_round"],
                    "rounds_run": s["rounds_run"],
                    "stopped": s["stopped"],
                    "leakage": s["leakage"]["stats"],
                    "theta_star_match": s.get("theta_star_match"),
                    "hypotheses": s.get("hypotheses"),
                }
                for i, (o, s) in enumerate(results)
            ],
            "table": table,
            "wall_seconds": time.time() - t0,
        }
    )


FEATURE = Feature(
    name="ifca",
    description="Laplace-sanitizing IFCA with per-client leakage ledgers (GP).",
    keys=KEYS,
    scenarios=SCENARIOS,
    runners={KIND: run_ifca},
    client_tasks=(IFCA_TASK,),
    checks=(check_ifca,),
)
