"""Exact (ε, δ) of a pair of one-dimensional Gaussians (the one-shot estimate's last step).

For output distributions P = N(μ₀, σ₀²) and Q = N(μ₁, σ₁²) the tight δ at ε is the hockey-stick
divergence, taken in both directions (DP is symmetric in the neighbouring pair):

    δ(ε) = max( E_P[(1 − e^{ε − L})₊], E_Q[(1 − e^{ε + L})₊] ),   L = log p/q,
    E_P[(1 − e^{ε−L})₊] = P(A) − e^ε·Q(A),   A = {x : log p(x) − log q(x) > ε}.

``log p − log q − ε = a·x² + b·x + c`` is a quadratic, so A is a union of at most two
intervals with closed-form ends and P(A), Q(A) are normal CDFs — no numerical integration.
Equal variances reduce to the Gaussian mechanism with ``μ = |μ₀ − μ₁|/σ`` (Balle & Wang 2018,
Thm. 8): ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` (:func:`gaussian_mechanism_delta`,
used in tests as an independent check). ε(δ) is found by root-finding on the decreasing
δ(ε) (:func:`epsilon_for_delta`). This is the final step of Andrew et al. (ICLR 2024,
§3 and Algorithm 2): "the ε of the pair of Gaussians fitted to the canary statistics".
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

__all__ = [
    "pair_delta",
    "epsilon_for_delta",
    "gaussian_mechanism_delta",
    "gaussian_mechanism_epsilon",
]

_EPS_MAX = 1e3


def _intervals(mu0: float, s0: float, mu1: float, s1: float, eps: float):
    """Intervals (lo, hi) where log N(x; μ₀, s₀²) − log N(x; μ₁, s₁²) > ε."""
    a = 0.5 / s1**2 - 0.5 / s0**2
    b = mu0 / s0**2 - mu1 / s1**2
    c = -0.5 * mu0**2 / s0**2 + 0.5 * mu1**2 / s1**2 + math.log(s1 / s0) - eps
    scale = max(abs(a), abs(b), 1e-300)
    if abs(a) <= 1e-12 * scale:  # linear: b·x + c > 0
        if b == 0:
            return [(-math.inf, math.inf)] if c > 0 else []
        root = -c / b
        return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
    disc = b * b - 4 * a * c
    if disc <= 0:
        return [(-math.inf, math.inf)] if a > 0 else []
    sq = math.sqrt(disc)
    r1, r2 = sorted(((-b - sq) / (2 * a), (-b + sq) / (2 * a)))
    return [(-math.inf, r1), (r2, math.inf)] if a > 0 else [(r1, r2)]


def _mass(intervals, mu: float, s: float) -> float:
    total = 0.0
    for lo, hi in intervals:
        # P(lo < X < hi) via the tail that keeps precision
        if lo == -math.inf:
            total += stats.norm.cdf(hi, mu, s)
        elif hi == math.inf:
            total += stats.norm.sf(lo, mu, s)
        else:
            total += stats.norm.cdf(hi, mu, s) - stats.norm.cdf(lo, mu, s)
    return float(total)


def _one_way(mu0: float, s0: float, mu1: float, s1: float, eps: float) -> float:
    region = _intervals(mu0, s0, mu1, s1, eps)
    q_mass = _mass(region, mu1, s1)
    scaled = math.exp(min(eps + math.log(q_mass), 700.0)) if q_mass > 0 else 0.0
    return max(0.0, _mass(region, mu0, s0) - scaled)


def _check(mu0: float, s0: float, mu1: float, s1: float) -> None:
    for name, value in (("mu0", mu0), ("mu1", mu1)):
        if not math.isfinite(value):
            raise ValueError(f"{name} = {value!r} is not allowed; expected a finite mean")
    for name, value in (("sigma0", s0), ("sigma1", s1)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} = {value!r} is not allowed; expected a finite number > 0")


def pair_delta(eps: float, mu0: float, s0: float, mu1: float, s1: float) -> float:
    """Tight δ at ε of N(μ₀, s₀²) vs N(μ₁, s₁²), both directions (module docstring)."""
    _check(mu0, s0, mu1, s1)
    if eps > _EPS_MAX:
        return 0.0
    return max(_one_way(mu0, s0, mu1, s1, eps), _one_way(mu1, s1, mu0, s0, eps))


def epsilon_for_delta(delta: float, mu0: float, s0: float, mu1: float, s1: float) -> float:
    """The smallest ε >= 0 with ``pair_delta(ε) <= δ`` (inf if none below 1e3)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta = {delta!r} is not allowed; expected a number in (0, 1)")
    _check(mu0, s0, mu1, s1)
    f = lambda e: pair_delta(e, mu0, s0, mu1, s1) - delta  # noqa: E731
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
        if hi > _EPS_MAX:
            return math.inf
    return float(optimize.brentq(f, hi / 2 if hi > 1 else 0.0, hi, xtol=1e-9))


def gaussian_mechanism_delta(eps: float, mu: float) -> float:
    """δ(ε) of the Gaussian mechanism with μ = sensitivity/σ (Balle & Wang 2018, Thm. 8)."""
    if mu <= 0:
        return 0.0
    second = math.exp(min(eps + float(stats.norm.logcdf(-eps / mu - mu / 2)), 700.0))
    return float(stats.norm.cdf(-eps / mu + mu / 2) - second)


def gaussian_mechanism_epsilon(mu: float, delta: float) -> float:
    """ε at δ of the Gaussian mechanism with μ = sensitivity/σ (0 for μ = 0)."""
    if not (math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu = {mu!r} is not allowed; expected a finite number >= 0")
    if mu == 0 or gaussian_mechanism_delta(0.0, mu) <= delta:
        return 0.0
    if mu > 1e4:  # ε ≈ μ²/2: beyond any meaningful figure
        return math.inf
    hi = max(1.0, mu * mu)
    while gaussian_mechanism_delta(hi, mu) > delta:
        hi *= 2
    return float(optimize.brentq(lambda e: gaussian_mechanism_delta(e, mu) - delta, 0, hi))


def fit_normal(values: np.ndarray) -> tuple[float, float]:
    """Sample mean and standard deviation (ddof = 1), the Gaussian fit of Andrew et al."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size < 2 or not np.all(np.isfinite(values)):
        raise ValueError(
            f"{values.size} values are not enough to fit a Gaussian; expected >= 2 finite"
        )
    return float(values.mean()), float(values.std(ddof=1))
