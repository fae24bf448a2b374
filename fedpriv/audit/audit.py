"""One audit from a canary set and the sequence of global models ``θ_0, θ_1, …, θ_T``.

:func:`audit_models` scores every canary under a threat model (:mod:`fedpriv.audit.one_shot`)
and returns both the one-run lower bound (Steinke et al.; only for inclusion probability 1/2)
and the one-shot estimate (Andrew et al.). :func:`canary_upper_bound` is the accountant's
figure for the same adjacency — one canary client added or removed — under server-side
Gaussian noise, so the lower bound has a number it must never exceed.

Upper bound for a canary (global DP, σ = z·C/m each round, a (weighted) mean aggregator).
Every reply is clipped to ‖Δ‖ <= C around the round's global model. With ``n`` real replies
and ``k`` other canaries (each canary weighted like an average real client), adding the canary
moves the mean by ``(x − mean_without)/(n + k + 1)``, of norm <= 2C/(n + k + 1) <= 2C/(n + 1)
(worst case over the other canaries, k = 0, as the lower bound's theorem needs DP for every
setting of the others). Per round that is the Gaussian mechanism with ``μ_t = 2C/((n_t+1)σ)``
``= 2m/((n_t + 1)·z)``; T rounds compose to ``μ = √(Σ μ_t²)`` (Dong, Roth & Su 2019, GDP
composition, exact for Gaussians) and ε(δ) follows (:func:`gaussian_mechanism_epsilon`).
The canary takes part in every round, so no sampling amplification applies. With all real
clients sampled (m = n_t) this is below the run's headline replace-one ε (μ = 2√T/z).

With a fixed denominator (``fixed_denominator``: the aggregate is ``Σ clip(Δ)/m`` whatever
the number of replies, :meth:`fedpriv.strategies.dp_wrappers.ServerSideFixedClippingDP.
use_fixed_denominator`) adding the canary moves the aggregate by at most C/m: ``μ_t = 1/z``,
``μ = √T/z`` — a real client's add/remove sensitivity.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from fedpriv.audit.canaries import CanarySet, flatten
from fedpriv.audit.gaussian_pair import gaussian_mechanism_epsilon
from fedpriv.audit.one_run import one_run_audit
from fedpriv.audit.one_shot import THREAT_MODELS, one_shot_estimate

__all__ = [
    "THREAT_MODEL_NAMES",
    "canary_statistics",
    "audit_scores",
    "audit_models",
    "canary_upper_bound",
    "THREAT_MODELS",
]


# the threat models' names: the auditor sees every round's release, or the final model only
THREAT_MODEL_NAMES = {"every-round": "white-box", "final": "final-model"}


def canary_statistics(
    canaries: CanarySet, models: Sequence[Sequence[np.ndarray]], threat_model: str
) -> np.ndarray:
    """Per-canary statistic: final ``cos(c, θ_T − θ_0)`` or every-round ``Σ_t cos/√T``."""
    if threat_model not in THREAT_MODELS:
        raise ValueError(
            f"threat_model = {threat_model!r} is not allowed; expected one of {THREAT_MODELS}"
        )
    if len(models) < 2:
        raise ValueError(f"{len(models)} models are not enough; expected θ_0 and >= 1 round")
    flat = [flatten(m) for m in models]
    if threat_model == "final":
        return canaries.cosines(flat[-1] - flat[0])
    total = np.zeros(canaries.count)
    for before, after in zip(flat[:-1], flat[1:]):
        total += canaries.cosines(after - before)
    return total / math.sqrt(len(flat) - 1)


def audit_scores(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    probability: float,
    delta: float,
    confidence: float,
    fdp: bool = True,
) -> dict[str, Any]:
    """Lower bound (inclusion probability 1/2 only) and estimate from per-canary scores.

    With ``fdp`` (and jax-privacy installed) also the one-run f-DP bound
    (:func:`fedpriv.audit.one_run_fdp.fdp_one_run_audit`) under ``epsilon_lower_bound_fdp``:
    its own confidence, a Gaussian-curve claim, never the headline.
    """
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    out: dict[str, Any] = {}
    if math.isclose(probability, 0.5):
        res = one_run_audit(scores, included, delta=delta, confidence=confidence)
        out["epsilon_lower_bound"] = res.epsilon_lower_bound
        out["one_run"] = res.as_dict()
        if fdp:
            out.update(_fdp_block(scores, included, delta, confidence))
    else:
        out["epsilon_lower_bound"] = None
        out["one_run"] = {"skipped": "Steinke et al.'s bound needs inclusion probability 0.5"}
    inserted, held_out = scores[included], scores[~included]
    if inserted.size >= 2 and held_out.size >= 2:
        est = one_shot_estimate(inserted, held_out, delta=delta)
        out["epsilon_estimate"] = est.epsilon if math.isfinite(est.epsilon) else "inf"
        out["one_shot"] = est.as_dict()
    else:
        out["epsilon_estimate"] = None
        out["one_shot"] = {"skipped": "fewer than 2 inserted or 2 held-out canaries"}
    return out


def _fdp_block(scores, included, delta: float, confidence: float) -> dict[str, Any]:
    try:
        from fedpriv.audit.one_run_fdp import fdp_one_run_audit

        res = fdp_one_run_audit(scores, included, delta=delta, confidence=confidence)
    except ImportError as exc:
        return {"epsilon_lower_bound_fdp": None, "one_run_fdp": {"skipped": str(exc)}}
    return {"epsilon_lower_bound_fdp": res["epsilon_lower_bound"], "one_run_fdp": res}


def _audit_one(canaries: CanarySet, stats: np.ndarray, delta: float, confidence: float) -> dict:
    return audit_scores(
        stats, canaries.included, probability=canaries.probability, delta=delta,
        confidence=confidence,
    )  # fmt: skip


def audit_models(
    canaries: CanarySet,
    models: Sequence[Sequence[np.ndarray]],
    *,
    delta: float,
    confidence: float = 0.95,
    threat_model: str = "final",
) -> dict[str, Any]:
    """Lower bound and estimate for ``threat_model``, and both threat models in a block."""
    by_model = {
        tm: _audit_one(canaries, canary_statistics(canaries, models, tm), delta, confidence)
        for tm in THREAT_MODELS
    }
    for tm, block in by_model.items():
        block["name"] = THREAT_MODEL_NAMES[tm]
    head = by_model[threat_model]
    return {
        "threat_model": threat_model,
        "threat_model_name": THREAT_MODEL_NAMES[threat_model],
        "epsilon_lower_bound": head["epsilon_lower_bound"],
        "confidence": confidence,
        "epsilon_estimate": head["epsilon_estimate"],
        "delta": delta,
        "threat_models": by_model,
        "canaries": {
            "count": canaries.count,
            "inserted": int(canaries.included.sum()),
            "held_out": int((~canaries.included).sum()),
            "norm": canaries.norm,
            "inclusion_probability": canaries.probability,
            "num_params": canaries.num_params,
        },
        "rounds": len(models) - 1,
    }


def canary_upper_bound(
    *,
    noise_multiplier: float,
    num_sampled_clients: int,
    real_reports_per_round: Sequence[int],
    delta: float,
    fixed_denominator: bool = False,
) -> Optional[dict[str, Any]]:
    """The accountant's ε for one canary client (module docstring); None without noise."""
    if noise_multiplier <= 0 or not real_reports_per_round:
        return None
    m, z = int(num_sampled_clients), float(noise_multiplier)
    if fixed_denominator:
        mus = [1.0 / z for _ in real_reports_per_round]
    else:
        mus = [2.0 * m / ((int(n) + 1) * z) for n in real_reports_per_round]
    mu = math.sqrt(sum(x * x for x in mus))
    return {
        "epsilon": gaussian_mechanism_epsilon(mu, delta),
        "delta": delta,
        "mu": mu,
        "rounds": len(mus),
        "adjacency": "add/remove one canary client (present in every round)",
        "method": "Gaussian mechanism per round, sensitivity "
        + ("C/m (fixed denominator)" if fixed_denominator else "2C/(n+1) of the weighted mean")
        + ", GDP composition (exact), no sampling amplification",
    }
