"""IFCA with GP's Laplace sanitizing (``ifca-laplace``): chosen by the scenario kind.

Each user sanitizes its own vector with Laplace noise of scale ‖δ‖/(ν) (GP Algorithm 2); the
leakage n/ν per participation is a heuristic relative to the data-dependent ‖δ‖ (GP Thm
3.1), no (ε, δ). The server is untrusted; users own ν, the leakage budget, the keys that
make a user a validation user and its query budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import OPT_INS, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

NAME = "ifca"


@dataclass(frozen=True)
class IFCAParams:
    """ν, the leakage budget and a validation user's query budget."""

    noise_multiplier: float | str = config_key("ifca-noise-multiplier")
    leakage_budget: float = config_key("leakage-budget")
    validation_query_budget: int = config_key("validation-query-budget")


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """GP's heuristic leakage n/ν per participation, no ε."""
    del examples_per_client
    params: IFCAParams = spec.params
    nu = params.noise_multiplier
    per = None if nu == 0 else "n/nu per participation (n = number of model parameters)"
    return {
        "mode": NAME,
        "epsilon": None,
        "leakage_per_participation": per,
        "noise_multiplier": nu,
        "notes": [
            "GP leakage is a heuristic relative to the data-dependent scale ||delta||; "
            "no (epsilon, delta) guarantee"
            if nu
            else "nu = 0: no sanitization"
        ],
    }


MODE = Mode(
    name=NAME,
    params=IFCAParams,
    threat_model={
        "server": "not trusted: it sees only each user's Laplace-sanitized vector.",
        "users": "trusted with their own data, nu and leakage budget.",
    },
    epsilon_against={"server": "none (GP's heuristic leakage n/nu, no epsilon)"},
    plan=plan,
    disclosure={"train": frozenset(), "evaluate": frozenset()},
    unaccounted=("final evaluation: every training user's cluster index and test metrics",),
    owned_keys={
        "client": (
            "ifca-noise-multiplier",
            "leakage-budget",
            "num-clients",
            "validation-clients",
            "validation-query-budget",
            *OPT_INS,
        )
    },
    summary_key="leakage",
    report_label="IFCA-Laplace",
    client_task=NAME,
    selectable=False,
)
