"""The one ServerApp of ``flwr run .``: resolve the config, dispatch on the scenario kind.

Data flow (standard kind): validated config -> federated data (server val/test) ->
partition discovery -> initial weights (server pretraining for FedAvgM/FedOpt/FedYogi) ->
stock strategy -> privacy wrapper -> update validation -> round recorder ->
``Strategy.start`` -> rounds.jsonl / summary.json / plots.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import time  # noqa: E402
from collections.abc import Callable, Mapping  # noqa: E402
from logging import ERROR  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context  # noqa: E402
from flwr.common import log  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy.strategy import Strategy  # noqa: E402

from clients.keras_client import (  # noqa: E402
    TrainSettings,
    federated_data,
    initial_weights,
    model_for,
    predict_proba,
    train_local,
)
from fedpriv.config import ConfigError  # noqa: E402
from fedpriv.data import DataError, FederatedData  # noqa: E402
from fedpriv.metrics import classification_report, last_k_stats, micro_roc_curve  # noqa: E402
from fedpriv.plots import plot_accuracy_per_round, plot_roc  # noqa: E402
from fedpriv.runlog import RunLog  # noqa: E402
from scenarios.federation import PartitionGrid, discover_partitions  # noqa: E402
from scenarios.recorder import RoundRecorder, recording_evaluate_fn  # noqa: E402
from scenarios.registry import get_scenario, resolve_run_config  # noqa: E402
from strategies.factory import build_stock_strategy, needs_initial_pretraining  # noqa: E402
from strategies.validating import ValidUpdatesOnly  # noqa: E402

app = ServerApp()

# privacy mode -> fn(strategy, cfg, rng) -> wrapped strategy. "none" leaves it as is.
PRIVACY_WRAPPERS: dict[
    str, Callable[[Strategy, Mapping[str, Any], np.random.Generator], Strategy]
] = {"none": lambda s, cfg, rng: s}
# scenario kind -> fn(grid, cfg) -> None
RUNNERS: dict[str, Callable[[Grid, dict[str, Any]], None]] = {}


def run_config_as_record(cfg: Mapping[str, Any]) -> ConfigRecord:
    """The resolved config as a ConfigRecord (what clients receive)."""
    return ConfigRecord({k: v for k, v in cfg.items()})


def pretrain(cfg: Mapping[str, Any], data: FederatedData, weights: list) -> list:
    """Server-side pretraining of initial parameters on the validation split (MP)."""
    model = model_for(cfg, data)
    settings = TrainSettings.from_config(cfg, seed=int(cfg["seed"]))
    settings = TrainSettings(
        **{**settings.__dict__, "epochs": int(cfg["pretrain-epochs"]), "proximal_mu": 0.0}
    )
    new_weights, _ = train_local(model, weights, data.x_val, data.y_val, settings)
    return [w.copy() for w in new_weights]


def server_evaluator(cfg: Mapping[str, Any], data: FederatedData):
    """Server test-set metrics of a weight list (classification report + loss)."""
    model = model_for(cfg, data)

    def evaluate(weights: list) -> dict[str, float]:
        proba = predict_proba(model, weights, data.x_test)
        report = classification_report(data.y_test, proba)
        eps = 1e-7
        report["loss"] = float(
            -np.mean(np.log(np.clip(proba[np.arange(len(proba)), data.y_test], eps, 1)))
        )
        return report

    return evaluate


def build_strategy(cfg: Mapping[str, Any], grid: PartitionGrid, rng: np.random.Generator):
    """Stock strategy -> privacy wrapper -> update validation -> round recorder."""
    strategy = build_stock_strategy(cfg)
    strategy = PRIVACY_WRAPPERS[cfg["privacy"]](strategy, cfg, rng)
    strategy = ValidUpdatesOnly(
        strategy, on_invalid=cfg["invalid-update"], accept_failures=cfg["accept-failures"]
    )
    return RoundRecorder(
        strategy,
        grid=grid,
        num_clients=int(cfg["num-clients"]),
        clients_per_round=int(cfg["clients-per-round"]),
        rng=rng,
    )


def summarise(cfg: Mapping[str, Any], rounds: list[dict], final: dict, extra: dict) -> dict:
    """summary.json content: final server metrics, last-5 stats, config, seed."""
    accs = [
        r["distributed"].get("accuracy", np.nan)
        for r in rounds
        if r.get("round", 0) > 0 and "distributed" in r
    ]
    server_accs = [r["server"]["accuracy"] for r in rounds if r.get("round", 0) > 0]
    mean, std = last_k_stats(server_accs, 5)
    dmean, dstd = last_k_stats(accs, 5)
    return {
        "scenario": cfg["scenario"],
        "seed": cfg["seed"],
        "config": dict(cfg),
        "final": final,
        "last5": {
            "accuracy_mean": mean,
            "accuracy_std": std,
            "distributed_accuracy_mean": dmean,
            "distributed_accuracy_std": dstd,
        },
        **extra,
    }


def run_standard(grid: Grid, cfg: dict[str, Any]) -> None:
    """Train a stock (optionally privacy-wrapped) strategy and write the run outputs."""
    t0 = time.time()
    runlog = RunLog(cfg["output-dir"])
    data = federated_data(cfg)
    pgrid = PartitionGrid(grid, discover_partitions(grid, int(cfg["num-clients"])))
    rng = np.random.default_rng(int(cfg["seed"]))
    weights = initial_weights(cfg, data)
    if needs_initial_pretraining(cfg["strategy"]) and cfg["pretrain-epochs"] > 0:
        weights = pretrain(cfg, data, weights)
    recorder = build_strategy(cfg, pgrid, rng)
    rounds: list[dict] = []

    def on_round_end(record: dict) -> None:
        rounds.append(record)
        runlog.append_round(record)

    server_eval = server_evaluator(cfg, data)
    result = recorder.start(
        grid=pgrid,
        initial_arrays=ArrayRecord(weights),
        num_rounds=int(cfg["num-server-rounds"]),
        train_config=run_config_as_record(cfg),
        evaluate_config=run_config_as_record(cfg),
        evaluate_fn=recording_evaluate_fn(recorder, server_eval, on_round_end),
    )
    final_weights = result.arrays.to_numpy_ndarrays() if result.arrays else weights
    write_final_outputs(
        cfg, data, final_weights, rounds, runlog, extra={"wall_seconds": time.time() - t0}
    )


def write_final_outputs(cfg, data, weights, rounds, runlog: RunLog, extra: dict) -> dict:
    """summary.json, final model, accuracy and ROC plots."""
    model = model_for(cfg, data)
    proba = predict_proba(model, weights, data.x_test)
    final = classification_report(data.y_test, proba)
    summary = summarise(cfg, rounds, final, extra)
    for hook in SUMMARY_HOOKS:
        summary.update(hook(cfg, rounds))
    runlog.write_summary(summary)
    model.set_weights(weights)
    model.save(runlog.dir / "final_model.keras")
    np.savez(runlog.dir / "final_weights.npz", *weights)
    series = {
        "server test": [r["server"]["accuracy"] for r in rounds if r["round"] > 0],
        "distributed": [
            r.get("distributed", {}).get("accuracy", np.nan) for r in rounds if r["round"] > 0
        ],
    }
    title = f"{cfg['scenario']} {cfg['strategy']} {cfg['privacy']} seed {cfg['seed']}"
    plot_accuracy_per_round(series, runlog.dir / "accuracy.png", title=title)
    plot_roc({"micro": micro_roc_curve(data.y_test, proba)}, runlog.dir / "roc.png", title=title)
    np.savez(runlog.dir / "test_predictions.npz", y_true=data.y_test, proba=proba)
    return summary


# fn(cfg, rounds) -> dict merged into summary.json (e.g. the privacy block)
SUMMARY_HOOKS: list[Callable[[Mapping[str, Any], list[dict]], dict]] = []

RUNNERS["standard"] = run_standard


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Resolve and check the run config, then run the scenario's kind."""
    try:
        cfg = resolve_run_config(context.run_config)
    except (ConfigError, DataError) as err:
        log(ERROR, "%s", err)
        raise SystemExit(2) from err
    RUNNERS[get_scenario(cfg["scenario"]).kind](grid, cfg)


import scenarios.plugins  # noqa: E402,F401  (feature registrations)
