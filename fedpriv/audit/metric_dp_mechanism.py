"""Mechanism-level audit of metric DP (MP §6, SPEC §3.2) with power.

The round of :class:`fedpriv.privacy.dp.MetricScaledGaussian`, on the canary layout of
:mod:`fedpriv.audit.global_dp_mechanism` (K canaries on disjoint blocks of a flat model, a
few real clients, clip to C, sum over the FIXED m, replace-one ±A·c_j canaries): the only
change is the noise, ``σ = z·C/(m·d)`` with::

    d = max_{i<j} (1/|L|) Σ_ℓ ‖w_i(ℓ) − w_j(ℓ)‖_F

over the round's client models (one layer here, so ``d = max ‖Δ_i − Δ_j‖``), on the raw
client models (``distance-on = raw``, MP's authors' code and the MP scenarios) or the
clipped ones. Every client sends the same update every round, so d is the same in every
round. d is computed exactly from the structure (:func:`structured_distance`: canaries
on disjoint blocks, so canary–canary distances are ``√(‖a‖² + ‖b‖²)``; canary–real and
real–real pairs by inner products), cross-checked against
:func:`fedpriv.privacy.distance.max_pairwise_layer_distance` in the tests, and σ is
:func:`fedpriv.privacy.mechanisms.metric_stdv` (the expression
:meth:`MetricScaledGaussian.noise_stdv`
evaluates) with the mechanism's floor and cap on d.

The canaries have norm C (``canary_norm`` = C): clipping leaves them as sent, so d is set by
the real clients (raw deltas of norm 3C), not by the canaries. The real clients' example
weights (MP's ``dp-weighting = examples``) are not modelled: every client has weight 1.

What is tested. Metric DP claims no (ε, δ) (:data:`fedpriv.privacy.dp.METRIC_HEURISTIC`); the figure
is the empirical lower bound on the ε of one client's replace-one neighbour, reported beside
the global-DP accountant's ε at the same z, T, m (what the run would claim with σ = z·C/m).
A lower bound above that figure shows metric DP leaks more than global DP at that z.

MP's settings (:data:`MP_SETTINGS`): z = 0.01, C = 5, 20 rounds, m = 4 clients, raw d.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fedpriv.audit import global_dp_mechanism as gdm
from fedpriv.privacy.dp import MetricScaledGaussian
from fedpriv.privacy.mechanisms import metric_stdv

__all__ = [
    "MP_SETTINGS",
    "mechanism",
    "real_rows",
    "structured_distance",
    "round_sigma",
    "simulate_releases",
    "audit",
]

MP_SETTINGS = gdm.MUST_SHOW.with_(
    noise_multiplier=0.01,
    rounds=20,
    clients_per_round=4,
    population=4,
    clipping_norm=5.0,
    canary_norm=5.0,
)


def mechanism(cfg: gdm.GlobalDPAudit, distance_on: str = "raw") -> MetricScaledGaussian:
    """The metric-DP mechanism at the audit's z, C, m."""
    return MetricScaledGaussian(
        noise_multiplier=cfg.noise_multiplier,
        clipping_norm=cfg.clipping_norm,
        num_sampled_clients=cfg.clients_per_round,
        distance_on=distance_on,
    )


@functools.lru_cache(maxsize=4)
def real_rows(cfg: gdm.GlobalDPAudit) -> np.ndarray:
    """The real clients' raw deltas (norm 3C), the same draws as the global-DP audit's."""
    rng = np.random.default_rng([cfg.seed, 22, 3])
    rows = rng.normal(size=(cfg.real_clients, cfg.dim))
    return 3.0 * cfg.clipping_norm * rows / np.linalg.norm(rows, axis=1, keepdims=True)


def structured_distance(canary_rows: np.ndarray, real: np.ndarray) -> float:
    """``max ‖Δ_i − Δ_j‖`` over canaries ``(K, b)`` on disjoint blocks and dense real rows."""
    k, b = canary_rows.shape
    c2 = np.sum(canary_rows**2, axis=1)
    r2 = np.sum(real**2, axis=1)
    top = np.sort(c2)[-2:]
    best = float(top.sum()) if k >= 2 else 0.0
    cross = np.einsum("rkb,kb->rk", real.reshape(len(real), k, b), canary_rows)
    best = max(best, float(np.max(r2[:, None] + c2[None, :] - 2.0 * cross)))
    gram = real @ real.T
    pair = r2[:, None] + r2[None, :] - 2.0 * gram
    best = max(best, float(np.max(pair[np.triu_indices(len(real), 1)], initial=0.0)))
    return float(np.sqrt(max(best, 0.0)))


def round_sigma(
    cfg: gdm.GlobalDPAudit, signs: np.ndarray, distance_on: str = "raw"
) -> tuple[float, float]:
    """``(σ, d used)`` of every round: d on the raw or clipped models, the mechanism's floor."""
    mech = mechanism(cfg, distance_on)
    canary = cfg.canary_norm * signs[:, None] * gdm.canary_directions(cfg)
    real = real_rows(cfg)
    if distance_on == "clipped":
        canary = gdm._clip_rows(canary, cfg.clipping_norm)
        real = gdm._clip_rows(real, cfg.clipping_norm)
    d = max(structured_distance(canary, real), mech.min_distance)
    if mech.max_distance is not None:
        d = min(d, mech.max_distance)
    z, c, m = cfg.noise_multiplier, cfg.clipping_norm, cfg.clients_per_round
    return metric_stdv(z, c, m, d), d


def simulate_releases(
    cfg: gdm.GlobalDPAudit, signs: np.ndarray, rng: np.random.Generator, distance_on: str = "raw"
) -> np.ndarray:
    """``(T, d)`` model deltas: the global-DP round with metric DP's σ (module docstring)."""
    sigma, _ = round_sigma(cfg, signs, distance_on)

    def step(mech, total: np.ndarray, m: int, rng) -> np.ndarray:
        return mech.add_noise_stdv([total / m], sigma, rng)[0]

    return gdm.simulate_releases(cfg, signs, rng, round_fn=step)


def audit(
    cfg: gdm.GlobalDPAudit = MP_SETTINGS, *, distance_on: str = "raw", trial: int = 0
) -> dict[str, Any]:
    """One audit of metric DP (module docstring); ε-DP and f-DP bounds per threat model."""
    out = gdm.audit(
        cfg,
        trial=trial,
        simulate=lambda c, s, r: simulate_releases(c, s, r, distance_on),
    )
    sigma, d = round_sigma(cfg, gdm.canary_signs(cfg, trial), distance_on)
    global_eps = out.pop("accountant_epsilon")
    return {
        **out,
        "mechanism": f"metric DP, MetricScaledGaussian (sigma = z*C/(m*d), d on {distance_on} "
        "models, sum over fixed m)",
        "guarantee_tested": "none claimed (metric DP is a heuristic); the bound is compared with "
        "the global-DP accountant at the same z, T, m",
        "distance": d,
        "sigma": sigma,
        "global_dp_sigma": cfg.noise_multiplier * cfg.clipping_norm / cfg.clients_per_round,
        "global_dp_accountant_epsilon": global_eps if np.isfinite(global_eps) else "inf",
    }
