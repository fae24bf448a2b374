"""Mechanism-level audit of adaptive clipping (Andrew et al. 2021; ``privacy = adaptive-clip``).

The round of :class:`fedpriv.privacy.adaptive.AdaptiveClippingGaussian` releases two Gaussian
mechanisms of the same clients: the noised mean of the updates clipped to C_r
(``σ = z_Δ·C_r/m``) and, through the next clipping norm ``C_{r+1} = C_r·exp(−η_C·(b̃ − γ))``,
the noisy unclipped fraction ``b̃ = (Σ b_i + N(0, σ_b²))/m``. The accountant reports global DP
at the composed multiplier ``z = (z_Δ⁻² + (2σ_b)⁻²)^(−1/2)``; this audit tests that claim.

Design: K independent copies of the mechanism (vectorised), each with m clients — one canary
and m − 1 real clients of fixed norms on coordinates orthogonal to the canary's (they move C
towards their quantile and shift the count by an amount the auditor knows). Canary j has a
secret ``S_j ∈ {−1, +1}`` (replace-one, the accountant's adjacency for ``fixed`` sampling):

- ``S_j = +1``: update ``+ρ·C_r·e`` (ρ < 1: unclipped, counted ``b = 1``);
- ``S_j = −1``: update ``−A·C_r·e`` (A > 1: clipped to ``−C_r·e``, ``b = 0``),

so both sensitivities are at their maximum at once (≈ 2C_r on the sum, 1 on the count); the
canary follows C_r, which is public (an adaptive adversary, as the accountant allows).
:func:`run_rounds` is the wrapper's arithmetic (``process``, ``add_noise_stdv``, ``adapt``)
written for all copies at once; a test replays it through the real mechanism.

Views (scores; the auditor sees every round's model and clipping norm):

- ``white-box``: the likelihood-ratio score of both releases,
  ``Σ_t 2u_t/ẑ² + v_t/σ̂_b²`` with ``u_t = m·⟨Δw_t, e⟩/C_t ~ N(≈S, z_Δ²)`` and
  ``v_t = m·b̃_t − (real clients counted) − ½ ~ N(S/2, σ_b²)`` (b̃_t read off ``C_{t+1}/C_t``);
  ẑ², σ̂_b² are the pooled variances of u and v minus the signal's (¼, 1), estimated from
  the release alone, so a mechanism that adds less noise than it claims is weighted as it is;
- ``final-model``: ``⟨w_T − w_0, e⟩`` (the model only);
- ``clip-norms``: ``Σ_t v_t`` (the released clipping norms only).

Each view's bounds (:func:`fedpriv.audit.one_run_fdp.one_run_bounds`) run at confidence
``1 − β/3`` (Bonferroni over the three views). The claim: the mode's accountant,
:func:`fedpriv.privacy.accounting.rounds.global_dp_epsilon` at z for T rounds, m of N = m.
With m = N the composed privacy curve is Gaussian (μ = 2√T/z), as the f-DP bound assumes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from fedpriv.audit.one_run_fdp import one_run_bounds
from fedpriv.privacy.accounting.rounds import global_dp_epsilon
from fedpriv.privacy.adaptive import AdaptiveClippingGaussian
from fedpriv.privacy.participation import Participation

__all__ = [
    "AdaptiveClipAudit",
    "MUST_SHOW",
    "PLANTED",
    "VIEWS",
    "accountant_epsilon",
    "real_norms",
    "run_rounds",
    "simulate_releases",
    "scores",
    "audit",
]

INSIDE = 1.0 - 1e-6  # ρ: the "+1" canary's norm / C_r (unclipped)
OUTSIDE = 4.0  # A: the "−1" canary's norm / C_r (clipped)
VIEWS = ("white-box", "final-model", "clip-norms")
_FLOOR = 1e-12  # smallest estimated variance (a noiseless release: a huge weight)


@dataclass(frozen=True)
class AdaptiveClipAudit:
    """The mechanism (z, σ_b, T, m, C_0, γ, η_C, δ) and the audit budget (K canaries).

    Defaults: z = 9.5 with σ_b = m/20 = 5 (z_Δ = 30.4: the count carries most of the
    privacy loss, so an error in the composition shows), T = 6, m = N = 100, δ = 1e-5.
    """

    noise_multiplier: float = 9.5
    count_stddev: float = 5.0
    rounds: int = 6
    clients: int = 100
    delta: float = 1e-5
    clipping_norm: float = 1.0
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    num_canaries: int = 50_000
    confidence: float = 0.95
    seed: int = 0

    def mechanism(self) -> AdaptiveClippingGaussian:
        return AdaptiveClippingGaussian(
            noise_multiplier=self.noise_multiplier,
            clipping_norm=self.clipping_norm,
            num_sampled_clients=self.clients,
            target_quantile=self.target_quantile,
            learning_rate=self.learning_rate,
            count_stddev=self.count_stddev,
        )

    def with_(self, **changes: Any) -> AdaptiveClipAudit:
        return replace(self, **changes)


MUST_SHOW = AdaptiveClipAudit()
# Planted errors: the (update multiplier, count std) a wrong round uses instead of (z_Δ, σ_b).
PLANTED = {
    "update-at-z": lambda mech: (mech.total_noise_multiplier, mech.count_stddev),
    "count-noiseless": lambda mech: (mech.noise_multiplier, 0.0),
}


def accountant_epsilon(cfg: AdaptiveClipAudit) -> float:
    """The mode's reported ε: global DP's accountant at the composed z, T rounds, m of m."""
    if cfg.noise_multiplier == 0:
        return math.inf
    part = Participation(cfg.clients, cfg.clients, cfg.clients)
    report = global_dp_epsilon([cfg.noise_multiplier] * cfg.rounds, part, delta=cfg.delta)
    return float(report["epsilon"])


def real_norms(cfg: AdaptiveClipAudit) -> np.ndarray:
    """The m − 1 real clients' update norms, sorted: log-spaced in [C_0/10, 10·C_0]."""
    return cfg.clipping_norm * np.logspace(-1.0, 1.0, cfg.clients - 1)


def run_rounds(
    cfg: AdaptiveClipAudit,
    signs: np.ndarray,
    update_draws: np.ndarray,
    count_draws: np.ndarray,
    *,
    update_multiplier: Optional[float] = None,
    count_stddev: Optional[float] = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(T, K)`` canary coordinates of the model steps and ``(T + 1, K)`` clipping norms.

    ``update_draws``, ``count_draws``: ``(T, K)`` standard normals (the noise of the canary
    coordinate and of the count); the multipliers default to the mechanism's (z_Δ, σ_b).
    """
    mech = cfg.mechanism()
    z_upd = mech.noise_multiplier if update_multiplier is None else update_multiplier
    sigma_b = mech.count_stddev if count_stddev is None else count_stddev
    m, real, inside = cfg.clients, real_norms(cfg), np.asarray(signs) > 0
    norms = [np.full(len(signs), float(cfg.clipping_norm))]
    steps = []
    for t in range(cfg.rounds):
        c = norms[-1]
        canary = np.where(inside, INSIDE * c, np.minimum(OUTSIDE * c, c))  # clip to C_r
        steps.append(np.where(inside, canary, -canary) / m + z_upd * c / m * update_draws[t])
        counted = np.searchsorted(real, c, side="right") + inside  # ‖Δ‖ <= C_r: unclipped
        fraction = (counted + sigma_b * count_draws[t]) / m  # n = m reports
        norms.append(c * np.exp(-mech.learning_rate * (fraction - mech.target_quantile)))
    return np.stack(steps), np.stack(norms)


def canary_signs(cfg: AdaptiveClipAudit, trial: int = 0) -> np.ndarray:
    """The secret bits ``S_j ∈ {−1, +1}`` of one trial (uniform)."""
    return np.random.default_rng([cfg.seed, 36, 1, trial]).choice([-1, 1], size=cfg.num_canaries)


def simulate_releases(
    cfg: AdaptiveClipAudit, signs: np.ndarray, trial: int = 0, planted: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`run_rounds` with the trial's secret noise (or a planted error's multipliers)."""
    rng = np.random.default_rng([cfg.seed, 36, 2, trial])
    draws = rng.standard_normal((2, cfg.rounds, cfg.num_canaries))
    z_upd, sigma_b = PLANTED[planted](cfg.mechanism()) if planted else (None, None)
    return run_rounds(cfg, signs, draws[0], draws[1], update_multiplier=z_upd, count_stddev=sigma_b)


def scores(cfg: AdaptiveClipAudit, steps: np.ndarray, norms: np.ndarray) -> dict[str, np.ndarray]:
    """The three views' canary scores (module docstring), from the releases only."""
    mech = cfg.mechanism()
    m, before = cfg.clients, norms[:-1]
    u = m * steps / before
    fraction = mech.target_quantile - np.log(norms[1:] / before) / mech.learning_rate
    v = m * fraction - np.searchsorted(real_norms(cfg), before, side="right") - 0.5
    z2 = max(float(np.var(u)) - 1.0, _FLOOR)  # the signal's variance: ≈ 1 (means ±1)
    s2 = max(float(np.var(v)) - 0.25, _FLOOR)  # means ±½
    return {
        "white-box": np.sum(2.0 * u / z2 + v / s2, axis=0),
        "final-model": steps.sum(axis=0),
        "clip-norms": v.sum(axis=0),
    }


def audit(cfg: AdaptiveClipAudit = MUST_SHOW, *, trial: int = 0, planted: str = "") -> dict:
    """Lower bounds (ε-DP, f-DP, best) per view vs the accountant's ε; ``audit_failed`` when
    any view's best bound exceeds it. ``planted``: a key of :data:`PLANTED` (or "")."""
    mech = cfg.mechanism()
    signs = canary_signs(cfg, trial)
    views = scores(cfg, *simulate_releases(cfg, signs, trial, planted))
    claimed = accountant_epsilon(cfg)
    confidence = 1.0 - (1.0 - cfg.confidence) / len(VIEWS)
    out: dict[str, Any] = {
        "mechanism": "adaptive clipping, AdaptiveClippingGaussian (update z_update*C_r/m, "
        "clipped count sigma_b, C_r+1 = C_r*exp(-eta*(b - gamma)))",
        "planted": planted or None,
        "config": {
            "noise_multiplier": cfg.noise_multiplier,
            "update_noise_multiplier": mech.noise_multiplier,
            "count_stddev": mech.count_stddev,
            "rounds": cfg.rounds,
            "m": cfg.clients,
            "N": cfg.clients,
            "delta": cfg.delta,
            "initial_clipping_norm": cfg.clipping_norm,
        },  # fmt: skip
        "canaries": {"count": cfg.num_canaries, "copies": "one mechanism per canary"},
        "adjacency": "replace-one client (+rho*C_r*e unclipped or -4*C_r*e clipped)",
        "accountant_epsilon": claimed if math.isfinite(claimed) else "inf",
        "confidence_per_view": confidence,
    }
    for name in VIEWS:
        out[name] = one_run_bounds(
            views[name], signs, delta=cfg.delta, confidence=confidence
        ).as_dict()
    out["audit_failed"] = any(out[name]["best"] > claimed for name in VIEWS)
    return out
