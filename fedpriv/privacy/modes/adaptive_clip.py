"""``privacy = adaptive-clip``: global DP whose clipping norm follows a target quantile.

Andrew et al. (2021), Algorithm 1: the server clips each update to C_r, noises the mean with
``σ = z_Δ·C_r/m`` and moves C geometrically towards the γ-quantile of the update norms from a
noisy count of unclipped updates (std σ_b): ``C_{r+1} = C_r·exp(−η_C·(b̃ − γ))``. The two
releases compose into one Gaussian of the requested multiplier z:
``z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2)`` (z < 2σ_b, refused otherwise), so ε, sampling
amplification and ``max-epsilon`` are global DP's at z
(:mod:`fedpriv.privacy.adaptive`). A trusted server, as in global DP.
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
AUTO_COUNT_STDDEV = 0.0  # clipped-count-stddev = 0: m/20 (Andrew et al.), or z (count_stddev)
DEFAULT_NOISE_MULTIPLIER = 1.0  # global DP's: ε = 10.1 with 1,000 clients, 20 a round, 100 rounds


@dataclass(frozen=True)
class AdaptiveClipParams:
    """z (of both releases together), C_0, δ, weights, γ, η_C and σ_b. z's default 1 is global
    DP's (the same accountant: ε = 10.1 at 1,000 clients, 20 a round, 100 rounds; docs/privacy.md,
    "What an ε protects")."""

    noise_multiplier: float = config_key("noise-multiplier", mode_default=DEFAULT_NOISE_MULTIPLIER)
    clipping_norm: float = config_key("clipping-norm", mode_default=0.1)
    delta: float = config_key("dp-delta")
    weighting: str = config_key("dp-weighting")
    target_quantile: float = config_key("target-quantile")
    clip_learning_rate: float = config_key("clip-learning-rate")
    clipped_count_stddev: float = config_key("clipped-count-stddev")


def count_stddev(params: AdaptiveClipParams, noise_clients: int) -> float:
    """σ_b: the configured value; auto (0): m/20 (Andrew et al. 2021, §3; Flower's default)
    when it admits z (z < 2σ_b, i.e. z < m/10), else z, which the composition
    ``z⁻² = z_Δ⁻² + (2σ_b)⁻²`` then splits as z_Δ = 2z/√3 (the count takes a quarter)."""
    value = float(params.clipped_count_stddev)
    if value != AUTO_COUNT_STDDEV:
        return value
    andrew = noise_clients / 20.0
    z = float(params.noise_multiplier)
    return andrew if z < 2.0 * andrew else z


def plan(spec: RunSpec, examples_per_client: int | None = None) -> dict[str, Any]:
    """ε of ``spec.rounds`` rounds of the composed Gaussian (multiplier z on both releases),
    by global DP's accountant; the worst round the spec allows as in global DP."""
    from fedpriv.privacy import adaptive_noise as adaptive
    from fedpriv.privacy.accounting import planning as pl
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    del examples_per_client
    params: AdaptiveClipParams = spec.params
    part = spec.participation
    sigma_b = count_stddev(params, part.noise_clients)
    z_update = adaptive.update_noise_multiplier(params.noise_multiplier, sigma_b)
    factor, notes = pl.global_dp_round_factor(spec)
    z_round = params.noise_multiplier
    if factor != 1.0:
        z_round = adaptive.compose_multipliers(z_update * factor, 2.0 * sigma_b)
    report = global_dp_epsilon(
        [z_round] * spec.rounds, part, delta=params.delta, weighting=params.weighting
    )
    out = {k: pl.json_number(report.get(k)) for k in ("epsilon", "epsilon_pld", "epsilon_rdp")}
    out.update({k: report.get(k) for k in ("accountant", "adjacency", "sampling", "delta")})
    notes = [
        "client-level DP of two Gaussian releases per round composed (Andrew et al. 2021): "
        f"update noise z_update = {z_update:.6g}, clipped-count noise sigma_b = {sigma_b:.6g}",
        *notes,
    ]
    return {
        "mode": MODE.name, **out, "rounds": spec.rounds,
        "noise_multiplier": params.noise_multiplier,
        "round_noise_multiplier": z_round, "update_noise_multiplier": z_update,
        "clipped_count_stddev": sigma_b, "initial_clipping_norm": params.clipping_norm,
        "notes": notes,
    }  # fmt: skip


def epsilon_of_z(spec: RunSpec, examples: int | None = None):
    """ε(z): the plan at noise multiplier z (σ_b unchanged; z >= 2σ_b has no z_Δ: inf)."""

    def at(z: float) -> float:
        try:
            value = plan(MODE.with_noise(spec, z), examples)["epsilon"]
        except ValueError:
            return float("inf")
        return float(value)

    return at


MODE = Mode(
    name="adaptive-clip",
    params=AdaptiveClipParams,
    threat_model={
        "server": "trusted to clip, count, noise and keep its noise secret; it sees every "
        "client's un-noised update and norm.",
        "clients and observers": "see only noised releases (models and the clipping norm): "
        "client-level (epsilon, delta)-DP of both releases composed.",
    },
    epsilon_against={
        "server": "none (trusted)",
        "clients and observers": "client-level (epsilon, delta) of the released models and "
        "clipping norms",
    },
    plan=plan,
    disclosure={"train": PUBLIC, "evaluate": PUBLIC},
    unaccounted=UNACCOUNTED,
    report_label="Adaptive-clip DP",
    noise_field="noise_multiplier",
    epsilon_of_z=epsilon_of_z,
    against="clients and observers of the model (the server is trusted)",
    server_noise=True,
    budgeted=True,
    poisson=True,
    audit=None,
)
