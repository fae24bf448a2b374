"""``privacy = global-dp``: client-level DP of the server's Gaussian, σ = z·C/m'.

The server clips each update to C, averages and adds N(0, σ²) with σ = z·C/m' (McMahan et
al. 2018, DP-FedAvg); a trusted server, so the ε holds against clients and observers of the
released models. Planning: the run's own ε function fed the worst round the config allows
(:func:`fedpriv.privacy.accounting.planning.global_dp_round_factor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedpriv.privacy.modes.base import PUBLIC, Mode
from fedpriv.spec import RunSpec
from fedpriv.spec import key as config_key

UNACCOUNTED = (
    "train-loss: un-noised training loss of each client (aggregated into rounds.jsonl)",
    "distributed evaluation metrics on each client's test split",
)


@dataclass(frozen=True)
class GlobalDPParams:
    """z, C, δ and the aggregation weights. z's default 1.0 is DP-FedAvg's scale (McMahan et
    al. 2018); MP's 0.01 is the MP scenarios' own value (docs/privacy.md, "What an ε
    protects")."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=1.0)
    clipping_norm: float = config_key("clipping-norm", mode_default=5.0)
    delta: float = config_key("dp-delta")
    weighting: str = config_key("dp-weighting")


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """Global DP by the run's own ε function, fed the worst round the spec allows.

    Uniform weights: the run's multiplier ``z·m/m'`` (equal to the run's figure). Example
    weights: ``z/(m'·w_max)`` with w_max the worst over any sample of the partition's
    example counts (loaded from the data), or w_max = 1 when they cannot be loaded — never
    below what the run charges.
    """
    from fedpriv.privacy.accounting import planning as pl
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon, is_conditional

    del examples_per_client
    part = spec.participation
    if spec.strategy.strategy in pl.NOT_A_MEAN:
        note = "no epsilon: the median's sensitivity is not C/m (FedMedian is not a mean)"
        return {"mode": MODE.name, "epsilon": None, "notes": [note]}
    params: GlobalDPParams = spec.params
    z, delta, weighting = params.noise_multiplier, params.delta, params.weighting
    rounds = spec.rounds
    notes = ["client-level DP of the server-side Gaussian mechanism (every round noised)"]
    factor, factor_notes = pl.global_dp_round_factor(spec)
    z_round = z * factor
    notes += factor_notes
    conditional = is_conditional(weighting, part)
    plan_ = pl.gaussian_plan(
        z_round, rounds, part.population if conditional else part.per_round,
        part.population, delta, part.sampling,
    )  # fmt: skip
    report = global_dp_epsilon([z_round] * rounds, part, delta=delta, weighting=weighting)
    for key in ("epsilon", "epsilon_pld", "epsilon_rdp", "headline_from"):
        plan_[key] = pl.json_number(report.get(key))
    plan_.update({k: report[k] for k in ("accountant", "adjacency", "sampling")})
    if part.noise_clients != part.per_round:
        notes.append(
            f"sigma is calibrated to m' = {part.noise_clients} for {part.per_round} sampled clients"
        )
    worst = pl.worst_case(spec, z, rounds, delta)
    if worst:
        plan_["epsilon_condition"] = pl.ALL_REPLY_CONDITION
        notes.append(
            f"epsilon {plan_['epsilon']} {pl.ALL_REPLY_CONDITION}; epsilon_worst_case "
            f"{worst['epsilon_worst_case']}: {worst['epsilon_worst_case_condition']}"
        )
    return {"mode": MODE.name, "round_noise_multiplier": z_round, **plan_, **worst, "notes": notes}


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε(z) of the run's rounds at z·f
    (:func:`fedpriv.privacy.accounting.target.global_dp_of_z`)."""
    from fedpriv.privacy.accounting.target import global_dp_of_z

    del examples
    return global_dp_of_z(spec)


MODE = Mode(
    name="global-dp",
    params=GlobalDPParams,
    threat_model={
        "server": "trusted to clip, noise and keep its noise secret; it sees every client's "
        "un-noised update.",
        "clients and observers": "see only noised releases: client-level (epsilon, delta)-DP.",
    },
    epsilon_against={
        "server": "none (trusted)",
        "clients and observers": "client-level (epsilon, delta) of the released models",
    },
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    report_label="Global-DP",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="clients and observers of the model (the server is trusted)",
    server_noise=True,
    budgeted=True,
    poisson=True,
    audit="client",
)
