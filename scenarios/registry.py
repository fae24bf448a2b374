"""Named scenarios: data in a registry, not copied apps.

A scenario is a name, a ``kind`` (which server runner and client task it uses) and the
run-config defaults it sets on top of the key defaults of ``fedpriv.config``. The user's
``--run-config`` values win over both. Feature modules add scenarios with
:func:`register_scenario`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fedpriv.config import AUTO, ConfigError, resolve


@dataclass(frozen=True)
class Scenario:
    """A named experiment: what runs it and which defaults it sets."""

    name: str
    kind: str
    description: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


SCENARIOS: dict[str, Scenario] = {}


def register_scenario(scenario: Scenario) -> Scenario:
    """Add (or replace) a scenario."""
    SCENARIOS[scenario.name] = scenario
    return scenario


MP_TRAINING = {
    "model": "mp-cnn",
    "optimizer": "adam",
    "learning-rate": 1e-3,
    "batch-size": 32,
    "local-epochs": 5,
    "num-server-rounds": 20,
    "num-clients": 4,
    "partition": "homogeneous",
    "pretrain-epochs": 1,
}

register_scenario(
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
            "privacy": "metric-dp",
        },
    )
)
register_scenario(
    Scenario(
        "synthetic-mri",
        "standard",
        "Procedural 128x128 4-class MRI stand-in with the MP CNN and MP training settings "
        "(a pipeline test, not a medical result).",
        {"dataset": "synthetic-mri", "strategy": "fedavg", "privacy": "none", **MP_TRAINING},
    )
)
register_scenario(
    Scenario(
        "alzheimer",
        "standard",
        "Alzheimer MRI from data-path (image folder or parquet), MP CNN and settings.",
        {"dataset": "alzheimer", "strategy": "fedavg", "privacy": "none", **MP_TRAINING},
    )
)


def get_scenario(name: Any) -> Scenario:
    """The scenario called ``name`` or a one-line :class:`ConfigError`."""
    if not isinstance(name, str) or name not in SCENARIOS:
        raise ConfigError("scenario", name, "one of " + " | ".join(sorted(SCENARIOS)))
    return SCENARIOS[name]


def resolve_run_config(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario lookup, defaults layering and every check of ``fedpriv.config``."""
    name = run_config.get("scenario", "digits")
    scenario = get_scenario("digits" if name == AUTO else name)
    cfg = resolve({**run_config, "scenario": scenario.name}, scenario.defaults)
    if not cfg["output-dir"]:
        cfg["output-dir"] = (
            f"runs/{cfg['scenario']}-{cfg['strategy']}-{cfg['privacy']}-s{cfg['seed']}"
        )
    check_consistency(cfg)
    return cfg


CONSISTENCY_CHECKS: list = []


def check_consistency(cfg: Mapping[str, Any]) -> None:
    """Cross-key checks (each feature may add one to ``CONSISTENCY_CHECKS``)."""
    if cfg["dataset"] == "alzheimer" and not cfg["data-path"]:
        raise ConfigError("data-path", cfg["data-path"], "a local Alzheimer MRI folder or parquet")
    if cfg["clients-per-round"] > cfg["num-clients"]:
        raise ConfigError(
            "clients-per-round", cfg["clients-per-round"], f"<= num-clients ({cfg['num-clients']})"
        )
    for check in CONSISTENCY_CHECKS:
        check(cfg)
