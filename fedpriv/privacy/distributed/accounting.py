"""ε of the distributed Skellam mechanism over rounds and client sampling; μ for a target ε.

RDP of one release (Agarwal, Kairouz & Liu 2021, "The Skellam Mechanism for Differentially
Private Federated Learning", NeurIPS 2021, arXiv:2110.04995, §3: the RDP of the
multi-dimensional Skellam mechanism, Thm 3.5 there; the authors' accounting code calls the
same bound "Corollary 4.1"): adding ``Sk(μ)`` to each coordinate of an integer vector whose
change has L1 norm <= Δ1 and L2 norm <= Δ2 is (α, ε(α))-RDP for every integer α > 1 with

    ε(α) = α·Δ2²/(2μ) + min{ ((2α − 1)·Δ2² + 6·Δ1)/(4μ²),  3·Δ1/(2μ) }.

The first term is the Gaussian's RDP at variance μ; the min is the price of discreteness.
In the integer domain of :mod:`.encoding`, Δ2 = the conditional rounding bound B and
Δ1 = min(√d·B, B²) (integer coordinates: ``|v_k| <= v_k²``); replace-one doubles both.

Sum-level view: the server sees the modular sum, whose noise is ``Sk(n_noisy·μ)`` with μ each
client's share. Assumption: secure aggregation releases nothing unless at least t clients
survive (:mod:`.secagg`), and at most ``colluders`` of them share their noise with the server,
so ``n_noisy >= t − colluders`` (:func:`guaranteed_noisy_clients`).

Sampling, with every noise share in both neighbouring sums:

* ``fixed``: the server picks ``sampled`` of ``population`` clients; replace-one (one client's
  data replaced; the client and its noise in both sums). Amplified with Wang, Balle &
  Kasiviswanathan 2019, "Subsampled Rényi DP and Analytical Moments Accountant", Thm 9
  (general mechanism, ε(∞) = ∞), which holds only for readers who do not know the cohort:
  against the server, which picks it, use ``sampled = population`` and the rounds the client
  takes part in.
* ``poisson``: every client of the cohort takes part in secure aggregation and adds its noise,
  but includes its update only with probability q = sampled/population, by a secret coin of
  its own (:func:`.encoding.self_sample`; else it encodes a zero update). Neighbouring sums
  differ by one client's update, present or absent (add/remove of the update: Δ as is), its
  noise in both. Amplified with Zhu & Wang 2019, "Poisson Subsampled Rényi DP", Thm 6
  (general upper bound); secure aggregation hides which vectors are zero, so this holds
  against the server too.

Each amplified curve is capped order by order by the unsampled one. A noise share that left
the sum with its client's update would change the noise variance, which the bound above
does not cover (it shifts one noise law; for the Gaussian analogue, the Rényi divergence of
the sum with n + 1 shares from the sum with n is infinite at every order α >= n + 1): hence
a client's noise is in both sums in each relation above. Rounds add (RDP composition);
(ε, δ) from the composed RDP by dp_accounting's ``compute_epsilon`` (Balle et al. 2020
conversion), over the integer orders :data:`ORDERS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import special

import fedpriv.privacy.accounting._checks as _checks
from fedpriv.privacy.accounting.budget import smallest_noise_multiplier
from fedpriv.privacy.accounting.rdp import epsilon_from_rdp

__all__ = [
    "ORDERS",
    "skellam_sensitivities",
    "skellam_rdp",
    "poisson_subsampled_rdp",
    "fixed_subsampled_rdp",
    "guaranteed_noisy_clients",
    "skellam_round_rdp",
    "skellam_epsilon",
    "noise_variance_for_epsilon",
]

ORDERS = np.array([*range(2, 65), 72, 80, 96, 112, 128, 160, 192, 256], dtype=np.float64)
ORDERS.flags.writeable = False
RdpCurve = Callable[[np.ndarray], np.ndarray]  # integer orders -> RDP of the base mechanism


def skellam_sensitivities(
    norm_bound: float, dimension: int, *, sampling: str = "fixed"
) -> tuple[float, float]:
    """(Δ1, Δ2) of one client's rounded vector: ``(min(√d·B, B²), B)``, doubled under
    replace-one (``fixed`` sampling), as is under add/remove-one (``poisson``)."""
    bound = _checks.number("norm_bound", norm_bound, lo_open=True)
    dimension = _checks.integer("dimension", dimension)
    factor = 2.0 if _checks.sampling(sampling) == "fixed" else 1.0
    l1 = min(math.sqrt(dimension) * bound, bound**2)
    return factor * l1, factor * bound


def skellam_rdp(orders: np.ndarray, *, l1: float, l2: float, variance: float) -> np.ndarray:
    """Thm 3.5's ε(α) at integer ``orders`` > 1 for noise ``Sk(variance)`` per coordinate."""
    alpha = np.asarray(orders, dtype=np.float64)
    if np.any(alpha < 2) or np.any(alpha != np.floor(alpha)):
        raise ValueError(f"orders = {orders!r} is not allowed; expected integers >= 2")
    l1 = _checks.number("l1", l1)
    l2 = _checks.number("l2", l2)
    mu = _checks.number("variance", variance, lo_open=True)
    gaussian = alpha * l2**2 / (2.0 * mu)
    discrete = np.minimum(
        ((2.0 * alpha - 1.0) * l2**2 + 6.0 * l1) / (4.0 * mu**2), 3.0 * l1 / (2.0 * mu)
    )
    return gaussian + discrete


def _log_binomials(alpha: int) -> np.ndarray:
    """``log C(α, j)`` for j = 0..α."""
    j = np.arange(alpha + 1, dtype=np.float64)
    return (
        special.gammaln(alpha + 1.0) - special.gammaln(j + 1.0) - special.gammaln(alpha - j + 1.0)
    )


def _amplified(curve: RdpCurve, q: float, orders: np.ndarray, terms: Callable) -> np.ndarray:
    out = []
    for alpha in np.asarray(orders, dtype=np.int64):
        base = curve(np.arange(2, alpha + 1, dtype=np.float64))  # ε(j), j = 2..α
        log_a = special.logsumexp(terms(int(alpha), base, q))
        out.append(min(log_a / (alpha - 1.0), float(base[-1])))
    return np.array(out)


def _poisson_terms(alpha: int, base: np.ndarray, q: float) -> np.ndarray:
    log_c, j = _log_binomials(alpha), np.arange(3, alpha + 1)
    first = (alpha - 1) * math.log1p(-q) + math.log1p((alpha - 1) * q)
    second = log_c[2] + 2 * math.log(q) + (alpha - 2) * math.log1p(-q) + base[0]
    rest = math.log(3.0) + log_c[j] + j * math.log(q) + (alpha - j) * math.log1p(-q)
    return np.concatenate([[first, second], rest + (j - 1) * base[j - 2]])


def poisson_subsampled_rdp(curve: RdpCurve, q: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Zhu & Wang 2019, Thm 6: RDP at integer ``orders`` of a mechanism with RDP ``curve``
    run on a Poisson sample of rate q < 1 (add/remove-one), capped by ``curve`` itself::

        (α−1)·ε'(α) <= log[(1−q)^{α−1}(αq − q + 1) + C(α,2)q²(1−q)^{α−2}e^{ε(2)}
                           + 3·Σ_{j=3..α} C(α,j) q^j (1−q)^{α−j} e^{(j−1)ε(j)}].
    """
    q = _checks.number("q", q, lo_open=True)
    if q >= 1.0:
        raise ValueError(f"q = {q!r} is not allowed; expected a number in (0, 1)")
    return _amplified(curve, q, orders, _poisson_terms)


def _fixed_terms(alpha: int, base: np.ndarray, q: float) -> np.ndarray:
    log_c, j = _log_binomials(alpha), np.arange(3, alpha + 1)
    pair = min(math.log(4.0) + math.log(math.expm1(base[0])), base[0] + math.log(2.0))
    second = 2 * math.log(q) + log_c[2] + pair
    rest = math.log(2.0) + j * math.log(q) + log_c[j] + (j - 1) * base[j - 2]
    return np.concatenate([[0.0, second], rest])


def fixed_subsampled_rdp(curve: RdpCurve, q: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Wang, Balle & Kasiviswanathan 2019, Thm 9 with ε(∞) = ∞: RDP at integer ``orders`` of
    a replace-one mechanism run on a fixed-size sample of a fraction q < 1, capped::

        (α−1)·ε'(α) <= log[1 + q²C(α,2)·min{4(e^{ε(2)} − 1), 2e^{ε(2)}}
                           + 2·Σ_{j=3..α} q^j C(α,j) e^{(j−1)ε(j)}].
    """
    q = _checks.number("q", q, lo_open=True)
    if q >= 1.0:
        raise ValueError(f"q = {q!r} is not allowed; expected a number in (0, 1)")
    return _amplified(curve, q, orders, _fixed_terms)


def guaranteed_noisy_clients(threshold: int, colluders: int = 0) -> int:
    """Clients whose noise is in every released sum: ``t − colluders`` (no sum is unmasked
    with fewer than t survivors; a colluder's noise is known to the server)."""
    threshold = _checks.integer("threshold", threshold)
    colluders = _checks.integer("colluders", colluders, lo=0)
    if colluders >= threshold:
        raise ValueError(
            f"colluders = {colluders} is not allowed; expected an integer < threshold = {threshold}"
        )
    return threshold - colluders


def skellam_round_rdp(
    noise_variance: float,
    *,
    noisy_clients: int,
    norm_bound: float,
    dimension: int,
    sampled: int,
    population: int,
    sampling: str = "fixed",
    orders: np.ndarray = ORDERS,
) -> np.ndarray:
    """RDP at ``orders`` of one round: the sum carries ``Sk(noisy_clients·μ)``; amplified by
    the cohort of ``sampled`` out of ``population`` when it is smaller."""
    mu = _checks.number("noise_variance", noise_variance, lo_open=True)
    noisy = _checks.integer("noisy_clients", noisy_clients)
    sampled, population = _checks.population(sampled, population)
    l1, l2 = skellam_sensitivities(norm_bound, dimension, sampling=sampling)

    def curve(alphas: np.ndarray) -> np.ndarray:
        return skellam_rdp(alphas, l1=l1, l2=l2, variance=noisy * mu)

    if sampled == population:
        return curve(np.asarray(orders, dtype=np.float64))
    amplify = (
        fixed_subsampled_rdp if _checks.sampling(sampling) == "fixed" else poisson_subsampled_rdp
    )
    return amplify(curve, sampled / population, orders)


def skellam_epsilon(noise_variance: float, *, rounds: int, delta: float, **round_args) -> float:
    """ε at ``delta`` after ``rounds`` rounds of :func:`skellam_round_rdp` (same arguments)."""
    rounds = _checks.integer("rounds", rounds)
    rdp = rounds * skellam_round_rdp(noise_variance, **round_args)
    return epsilon_from_rdp(round_args.get("orders", ORDERS), rdp, delta)


def noise_variance_for_epsilon(
    target: float, *, noisy_clients: int, norm_bound: float, **epsilon_args
) -> tuple[float, float]:
    """The smallest per-client μ (to 0.1 % in √μ) with ε <= ``target``, and that ε.

    Bisection (:func:`fedpriv.privacy.accounting.budget.smallest_noise_multiplier`) over the
    aggregate's noise multiplier z = √(n_noisy·μ)/B, so the search range is that of a
    Gaussian's z whatever the scale γ; the other arguments are :func:`skellam_epsilon`'s.
    """
    noisy = _checks.integer("noisy_clients", noisy_clients)
    bound = _checks.number("norm_bound", norm_bound, lo_open=True)

    def variance(z: float) -> float:
        return (z * bound) ** 2 / noisy

    def epsilon_of(z: float) -> float:
        if z == 0:
            return math.inf
        return skellam_epsilon(variance(z), noisy_clients=noisy, norm_bound=bound, **epsilon_args)

    z, epsilon = smallest_noise_multiplier(epsilon_of, target)
    return variance(z), epsilon
