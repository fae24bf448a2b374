"""Feature ``standard``: the core run-config keys, the embedded scenarios and the standard run.

Data flow of the standard kind: validated config -> federated data (server val/test) ->
partition discovery -> initial weights (server pretraining for FedAvgM/FedOpt/FedYogi) ->
stock strategy -> privacy wrapper (``Catalog.wrapper`` of the config's mode) -> update
validation -> round recorder -> ``Strategy.start`` (resumable: a checkpoint per round,
:mod:`fedpriv.scenarios.app.resume`) -> rounds.jsonl / summary.json / plots.

The Keras client code, metrics and plots (TensorFlow, scikit-learn, matplotlib: the
``simulation`` extra) are imported inside the functions that run, so the feature list
imports in the base install (``fedpriv epsilon``, ``fedpriv keys``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.cli import launch, listing
from fedpriv.scenarios.config.feature import Catalog, Feature, Scenario
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.standard.keys import KEYS

from fedpriv.data import PATH_DATASETS
from fedpriv.privacy.modes import metric_dp
from fedpriv.privacy.modes.none import MODE as NO_MODE

if TYPE_CHECKING:
    from fedpriv.scenarios.config.specs import ServerRun
    from flwr.serverapp import Grid

MP_TRAINING = {
    "model": "mp-cnn",
    "optimizer": "adam",
    "learning-rate": 1e-3,
    "batch-size": 32,
    "local-epochs": 5,
    "num-server-rounds": 20,
    "num-clients": 4,
    "partition": "homogeneous",
    # MP's noise (z = 0.01, C = 5; SPEC's MP grid): the paper's value, not a guarantee (global
    # DP's ε over 20 rounds ~1e5: the run says "no meaningful protection"); the modes' own
    # defaults (global DP z = 1) apply to every other scenario
    "noise-multiplier": 0.01,
    "clipping-norm": 5.0,
    "pretrain-epochs": 1,
    # MP's own choices, explicit: the authors' raw distance (no sigma floor),
    # FedAvg's example weights (accounted by the largest weight, per-client epsilon) and the
    # clients' evaluation metrics (unaccounted; listed in summary privacy.unaccounted)
    "distance-on": "raw",
    "dp-weighting": "examples",
    "unaccounted-metrics": True,
}

SCENARIOS = (
    Scenario(
        "digits",
        "standard",
        "Embedded scikit-learn digits, 4 IID clients, metric DP around FedAvg (the default run).",
        {
            "dataset": "digits",
            "model": "digits-cnn",
            "partition": "iid",
            "num-clients": 4,
            "num-server-rounds": 8,
            "local-epochs": 2,
            "batch-size": 16,
            "learning-rate": 3e-3,
            "optimizer": "adam",
            "strategy": "fedavg",
            "privacy": metric_dp.MODE.name,
        },
    ),
    Scenario(
        "synthetic-mri",
        "standard",
        "Procedural 128x128 4-class MRI stand-in with the MP CNN and MP training settings "
        "(a pipeline test, not a medical result).",
        {"dataset": "synthetic-mri", "strategy": "fedavg", "privacy": "none", **MP_TRAINING},
    ),
    Scenario(
        "alzheimer",
        "standard",
        "Alzheimer MRI from data-path (image folder or parquet), MP CNN and settings.",
        {"dataset": "alzheimer", "strategy": "fedavg", "privacy": "none", **MP_TRAINING},
    ),
)


PATH_HINTS = {
    "alzheimer": "a local Alzheimer MRI folder or parquet",
    "cifar10": "a local cifar-10-batches-py folder (or its parent)",
    "cifar100": "a local cifar-100-python folder (or its parent)",
    "emnist": "a local LEAF FEMNIST data folder or TFF fed_emnist h5 files",
}


def check_core(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """Cross-key checks of every run: a data path for the datasets read from disk, m <= N."""
    del catalog
    if cfg["dataset"] in PATH_DATASETS and not cfg["data-path"]:
        raise ConfigError("data-path", cfg["data-path"], PATH_HINTS[cfg["dataset"]])
    if cfg["clients-per-round"] > cfg["num-clients"]:
        raise ConfigError(
            "clients-per-round", cfg["clients-per-round"], f"<= num-clients ({cfg['num-clients']})"
        )


# --- the standard run -------------------------------------------------------------------------


def run_standard(grid: Grid, run: ServerRun, catalog: Catalog) -> None:
    """Runner of kind ``standard``: one resumable training run
    (:func:`fedpriv.scenarios.app.engine.train_run`; a finished run of this config is not started:
    the
    ServerApp and ``run-plan`` check completion before any runner)."""
    from fedpriv.clients.partitions import federated_data
    from fedpriv.scenarios.app.engine import RunHooks, prepare_server, train_run
    from fedpriv.scenarios.app.startup import data_loaded
    from fedpriv.scenarios.nodes.virtual_grid import federation_grid

    data = federated_data(run.spec.data)
    data_loaded(run.spec, data)
    initial = prepare_server(run.spec, data)  # while the workers start
    pgrid = federation_grid(grid, run)
    hooks = RunHooks(summary_extra=None, after_run=audit_hook)
    train_run(pgrid, run, data, catalog, hooks=hooks, resumable=True, initial=initial())


def audit_hook(end: Any) -> dict:
    """The canary audit of a finished run (``fedpriv.scenarios.audit.feature``), written to
    audit.json and
    put into summary.json (``{}`` when the run has no canaries)."""
    from fedpriv.clients.keras_client import model_for, predict_proba
    from fedpriv.scenarios.audit.feature import audit_outcome, membership_block, write_audit

    model = model_for(end.run.spec.train, end.data)

    def predict(x):
        return predict_proba(model, end.weights, x)

    audit = audit_outcome(end.run, end.strategy, end.data, predict)
    if audit is None:
        return {}
    audit["membership"] = membership_block(end.data, predict)
    audit["accuracy"] = end.rounds[-1]["server"].get("accuracy") if end.rounds else None
    write_audit(end.run.spec.output_dir, audit)
    return {"audit": audit}


FEATURE = Feature(
    name="standard",
    description="Stock strategies (FedAvg ... FedYogi) on Keras clients; the core keys.",
    keys=KEYS,
    privacy_modes=(declare(NO_MODE, lambda strategy, run, rng: strategy),),
    scenarios=SCENARIOS,
    runners={"standard": run_standard},
    client_tasks=("standard",),
    checks=(check_core,),
    commands=(*launch.COMMANDS, *listing.COMMANDS),
)
