"""Feature ``adaptive_clip``: privacy mode ``adaptive-clip`` (Andrew et al. 2021).

Declares the mode's server wrapper
(:class:`fedpriv.strategies.adaptive_dp.ServerSideAdaptiveClippingDP`
around the stock strategy, noise from the secret ``dp-noise`` stream, global DP's accountant
and budget), its config check (``noise-multiplier < 2*clipped-count-stddev``, one line) and its
summary.json ``privacy`` block (ε recomposed from the charged rounds, the clipping-norm
trajectory).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from fedpriv.scenarios.adaptive_clip.keys import KEYS
from fedpriv.scenarios.app.privacy_modes import declare
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun, run_spec

from fedpriv import seeds
from fedpriv.privacy.disclosure import unaccounted_channels
from fedpriv.privacy.modes import adaptive_clip, mode_of
from fedpriv.reporting.records import PrivacyFigures, mean_of

MODE = adaptive_clip.MODE


def build_wrapper(strategy, run: ServerRun, rng: np.random.Generator):
    """The adaptive-clipping wrapper around the Message-API ``strategy`` (``rng``, the run's
    sampling Generator, is not used for noise: OS entropy unless ``reproducible-noise``)."""
    from fedpriv.scenarios.dp.feature import budget_of
    from fedpriv.scenarios.dp.server_ledger import attach_server_ledger
    from fedpriv.strategies.adaptive_dp import ServerSideAdaptiveClippingDP

    from fedpriv.privacy.accounting.rounds import global_dp_accountant

    del rng
    cfg, spec = run.record, run.spec
    params, part = spec.params, spec.participation
    wrapper = ServerSideAdaptiveClippingDP(
        strategy,
        noise_multiplier=params.noise_multiplier,
        clipping_norm=params.clipping_norm,
        num_sampled_clients=part.noise_clients,
        target_quantile=params.target_quantile,
        clip_learning_rate=params.clip_learning_rate,
        clipped_count_stddev=adaptive_clip.count_stddev(params, part.noise_clients),
        rng=seeds.privacy_stream(int(spec.seed), "dp-noise", reproducible=spec.reproducible_noise),
        accept_failures=bool(spec.strategy.accept_failures),
        weighting=params.weighting,
        accountant=global_dp_accountant(part, delta=params.delta, weighting=params.weighting),
        poisson=part.sampling == "poisson",
        max_epsilon=budget_of(cfg),
    )
    return attach_server_ledger(wrapper, run)


def check_adaptive(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``noise-multiplier`` < 2·σ_b (Andrew et al.'s condition for z_Δ), one line."""
    del catalog
    if mode_of(cfg) is not MODE:
        return
    spec = run_spec(cfg)
    z = spec.params.noise_multiplier
    sigma_b = adaptive_clip.count_stddev(spec.params, spec.participation.noise_clients)
    if z > 0 and z >= 2 * sigma_b:
        raise ConfigError(
            "noise-multiplier", z,
            f"< 2*clipped-count-stddev = {2 * sigma_b:g} with privacy = {MODE.name} "
            "(Andrew et al. 2021: z_update = (z^-2 - (2*sigma_b)^-2)^-1/2)",
        )  # fmt: skip


def summary_block(run: ServerRun, rounds: list[dict]) -> dict:
    """summary.json ``privacy``: ε of the charged rounds (global DP's accountant at the
    composed multipliers), z_Δ, σ_b and the clipping norm per round."""
    from fedpriv.privacy.accounting.rounds import global_dp_epsilon

    spec = run.spec
    if spec.mode is not MODE:
        return {}
    params, part = spec.params, spec.participation
    trained = [r for r in rounds if r.get("round", 0) > 0]
    noised = [r for r in trained if r.get("dp-noised")]
    report = global_dp_epsilon(
        [r["dp-round-noise-multiplier"] for r in noised], part,
        delta=params.delta, weighting=params.weighting,
    )  # fmt: skip
    block = {
        "mode": MODE.name, "noise_multiplier": params.noise_multiplier,
        "update_noise_multiplier": noised[0].get("dp-update-noise-multiplier") if noised else None,
        "clipped_count_stddev": adaptive_clip.count_stddev(params, part.noise_clients),
        "initial_clipping_norm": params.clipping_norm, "target_quantile": params.target_quantile,
        "clip_learning_rate": params.clip_learning_rate,
        "clipping_norm_per_round": [r.get("dp-clipping-norm") for r in trained],
        "sigma_per_round": [r.get("dp-sigma") for r in trained], "noised_rounds": len(noised),
        "num_sampled_clients": part.noise_clients, "client_sampling": part.sampling,
        "delta": params.delta, "formula": "sigma = z_update*C_r/m; C <- C*exp(-eta_C*(b - gamma))",
        "guarantee": "(epsilon, delta)-DP, client level, of the model and clipping-norm releases",
        "epsilon": {k: report.get(k) for k in ("epsilon", "epsilon_pld", "epsilon_rdp",
                                               "accountant", "adjacency", "sampling")},
        "unaccounted": unaccounted_channels(MODE.name, opted_in=spec.unaccounted_metrics),
    }  # fmt: skip
    figures = PrivacyFigures(
        mode=MODE.name, bound=f"{report.get('adjacency')}; {report.get('sampling')}",
        noise_multiplier=params.noise_multiplier, sigma_mean=mean_of(block["sigma_per_round"]),
        epsilon=report.get("epsilon"), epsilon_rdp=report.get("epsilon_rdp"), delta=params.delta,
    )  # fmt: skip
    return {MODE.summary_key: block, PrivacyFigures.KEY: figures.to_json()}


FEATURE = Feature(
    name="adaptive_clip",
    description="Server-side DP with adaptive clipping (Andrew et al. 2021), epsilon of both "
    "releases composed.",
    keys=KEYS,
    privacy_modes=(declare(MODE, build_wrapper),),
    summary=summary_block,
    checks=(check_adaptive,),
)
