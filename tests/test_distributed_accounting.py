"""Tests for fedpriv.privacy.distributed's accounting (the Skellam RDP of Agarwal, Kairouz &
Liu 2021, amplification by sampling, μ for a target ε) and its byte counts."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import special

from fedpriv.privacy.distributed import accounting as A
from fedpriv.privacy.distributed import cost

DELTA = 1e-5


def closed_form(alpha: int, l1: float, l2: float, mu: float) -> float:
    """The Skellam RDP bound, written out again, one order at a time."""
    gaussian = alpha * l2 * l2 / (2 * mu)
    small_noise = ((2 * alpha - 1) * l2 * l2 + 6 * l1) / (4 * mu * mu)
    large_noise = 3 * l1 / (2 * mu)
    return gaussian + (small_noise if small_noise < large_noise else large_noise)


def gaussian_epsilon(noise_multiplier: float, rounds: int, event=None) -> float:
    """dp_accounting's RDP accountant at our orders: ``rounds`` Gaussian releases."""
    accountant = dp_accounting.rdp.RdpAccountant(orders=list(A.ORDERS))
    base = event or dp_accounting.GaussianDpEvent(noise_multiplier)
    accountant.compose(dp_accounting.SelfComposedDpEvent(base, rounds))
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize("l1,l2,mu", [(40.0, 10.0, 50.0), (3000.0, 100.0, 1e4), (1.0, 1.0, 0.5)])
def test_skellam_rdp_is_the_closed_form(l1: float, l2: float, mu: float) -> None:
    mine = A.skellam_rdp(A.ORDERS, l1=l1, l2=l2, variance=mu)
    by_hand = [closed_form(int(a), l1, l2, mu) for a in A.ORDERS]
    np.testing.assert_allclose(mine, by_hand, rtol=1e-13)


def skellam_renyi(alpha: float, shift: int, mu: float) -> float:
    """D_α(Sk(μ) + shift ‖ Sk(μ)) summed numerically from the pmf e^{-μ}I_k(μ), |k| <= 200."""
    k = np.arange(-200, 201)
    log_p = np.log(special.ive(np.abs(k), mu))
    log_q = np.log(special.ive(np.abs(k - shift), mu))
    return float(special.logsumexp(alpha * log_q + (1 - alpha) * log_p) / (alpha - 1))


@pytest.mark.parametrize("mu,shift", [(20.0, 1), (20.0, 3), (200.0, 1), (200.0, 3)])
def test_skellam_rdp_bounds_the_true_renyi_divergence(mu: float, shift: int) -> None:
    """In one dimension (Δ1 = Δ2 = shift) the bound is above the exact divergence, and
    tight when μ is large."""
    orders = np.array([2.0, 4.0, 8.0, 16.0])
    bound = A.skellam_rdp(orders, l1=shift, l2=shift, variance=mu)
    exact = np.array([skellam_renyi(a, shift, mu) for a in orders])
    assert np.all(bound >= exact)
    if mu >= 200:
        assert np.all(exact >= 0.98 * bound)


def test_sensitivities_after_rounding() -> None:
    assert A.skellam_sensitivities(10.0, 400, sampling="poisson") == (100.0, 10.0)  # B² < √d·B
    assert A.skellam_sensitivities(10.0, 16, sampling="poisson") == (40.0, 10.0)
    assert A.skellam_sensitivities(10.0, 16, sampling="fixed") == (80.0, 20.0)  # replace-one


def _round_args(**overrides):
    args = dict(noisy_clients=10, norm_bound=1000.0, dimension=1024, sampled=50, population=50)
    args.update(overrides)
    return args


@pytest.mark.parametrize("z", [0.8, 2.0])
def test_large_noise_skellam_is_the_gaussian_of_dp_accounting(z: float) -> None:
    """With μ large in units of Δ2², Skellam's ε -> the Gaussian's at σ = √(nμ)/Δ2."""
    args = _round_args()
    l2 = 2 * args["norm_bound"]  # fixed sampling: replace-one
    mu = (z * l2) ** 2 / args["noisy_clients"]
    skellam = A.skellam_epsilon(mu, rounds=30, delta=DELTA, **args)
    gaussian = gaussian_epsilon(z, 30)
    assert gaussian <= skellam <= gaussian * 1.01


def test_small_noise_pays_for_discreteness() -> None:
    """At small μ the second term is visible: the test above would see it missing."""
    args = _round_args(norm_bound=3.0, dimension=64, noisy_clients=1)
    mu = (1.0 * 6.0) ** 2
    assert A.skellam_epsilon(mu, rounds=10, delta=DELTA, **args) > 1.02 * gaussian_epsilon(1.0, 10)


def test_the_sum_level_view_uses_only_the_noisy_clients() -> None:
    """Eight clients adding μ each is one Skellam of 8μ; fewer noisy clients, larger ε."""
    eight = A.skellam_epsilon(1e4, rounds=5, delta=DELTA, **_round_args(noisy_clients=8))
    one = A.skellam_epsilon(8e4, rounds=5, delta=DELTA, **_round_args(noisy_clients=1))
    four = A.skellam_epsilon(1e4, rounds=5, delta=DELTA, **_round_args(noisy_clients=4))
    assert eight == pytest.approx(one, rel=1e-12) and four > eight
    assert A.guaranteed_noisy_clients(7, colluders=2) == 5
    with pytest.raises(ValueError, match="colluders = 7 is not allowed; expected an integer < "):
        A.guaranteed_noisy_clients(7, colluders=7)


# --- amplification by sampling ----------------------------------------------------------------


def _gaussian_curve(sigma: float):
    return lambda alphas: alphas / (2 * sigma**2)


@pytest.mark.parametrize("q", [0.01, 0.2, 0.6])
def test_poisson_bound_brackets_the_exact_gaussian(q: float) -> None:
    """Zhu–Wang's general bound on the Gaussian differs from Mironov's exact A_α only by the
    factor 3 on the j >= 3 terms: between dp_accounting's value and it + log 3/(α − 1)."""
    sigma = 1.3
    mine = A.poisson_subsampled_rdp(_gaussian_curve(sigma), q)
    exact = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, A.ORDERS)  # noqa: SLF001
    assert np.all(mine >= exact - 1e-12)
    assert np.all(mine <= exact + math.log(3) / (A.ORDERS - 1) + 1e-12)


@pytest.mark.parametrize("q", [0.05, 0.5])
def test_fixed_size_bound_is_wbk_theorem_9(q: float) -> None:
    """dp_accounting's WBK for the Gaussian: Thm 27 (tighter or equal) up to α = 256 and
    Thm 9, our formula, above it: equal at α = 300."""
    sigma = 0.9
    orders = np.array([2.0, 3.0, 10.0, 64.0, 256.0, 300.0])
    mine = A.fixed_subsampled_rdp(_gaussian_curve(sigma), q, orders)
    theirs = rdp_lib._compute_rdp_sample_wor_gaussian(q, sigma, orders)  # noqa: SLF001
    assert np.all(mine >= theirs - 1e-12)
    assert mine[-1] == pytest.approx(theirs[-1], rel=1e-12)


def test_sampled_skellam_tends_to_the_sampled_gaussian() -> None:
    args = _round_args(sampled=20, population=1000, sampling="poisson")
    mu = (1.0 * args["norm_bound"]) ** 2 / args["noisy_clients"]  # z = 1, add/remove-one
    skellam = A.skellam_epsilon(mu, rounds=100, delta=DELTA, **args)
    event = dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.0))
    gaussian = gaussian_epsilon(1.0, 100, event)
    assert gaussian <= skellam <= 1.25 * gaussian
    unsampled = A.skellam_epsilon(mu, rounds=100, delta=DELTA, **_round_args(sampling="poisson"))
    assert skellam < unsampled / 5


def test_amplification_never_exceeds_the_unsampled_rdp() -> None:
    args = _round_args(sampling="fixed")
    unsampled = A.skellam_round_rdp(1e5, **args)
    nearly_all = A.skellam_round_rdp(1e5, **{**args, "sampled": 49})
    assert np.all(nearly_all <= unsampled)


def _zhu_wang_general(alpha: int, q: float, sigma: float) -> float:
    """Zhu & Wang 2019, Thm 6, for the Gaussian's ε(j) = j/(2σ²), written out again in log
    space one order at a time: (α − 1)·ε'(α) = log[(1−q)^{α−1}(αq − q + 1)
    + C(α,2)q²(1−q)^{α−2}e^{ε(2)} + 3·Σ_{j>=3} C(α,j)q^j(1−q)^{α−j}e^{(j−1)ε(j)}]."""

    def log_term(j: int) -> float:
        log_c = math.lgamma(alpha + 1) - math.lgamma(j + 1) - math.lgamma(alpha - j + 1)
        return log_c + j * math.log(q) + (alpha - j) * math.log1p(-q) + (j - 1) * j / (2 * sigma**2)

    logs = [(alpha - 1) * math.log1p(-q) + math.log1p((alpha - 1) * q), log_term(2)]
    logs += [math.log(3.0) + log_term(j) for j in range(3, alpha + 1)]
    top = max(logs)
    log_a = top + math.log(sum(math.exp(x - top) for x in logs))
    return min(log_a / (alpha - 1), alpha / (2 * sigma**2))


def test_page_gap_is_the_general_poisson_bound() -> None:
    """The distributed-DP utility page's setting (digits-mlp, d = 4810, C = 0.5, γ = 1024, all
    100 clients add noise, secret coin q = 0.2, 20 rounds, ε = 2): Skellam at 16 bits needs
    the z a Gaussian needs under the same general Poisson bound (its discreteness and the
    rounding cost < 0.5 %), and that bound, not the mechanism, is why it needs ~1.8 times the
    noise of the Gaussian's exact sampled RDP (and ~1.9 times central DP's PLD z, 2.16)."""
    from fedpriv.privacy.accounting.budget import smallest_noise_multiplier
    from fedpriv.privacy.distributed import encoding as E

    bound = E.EncodingParams(4810, 0.5, 1024.0, bits=16).norm_bound
    assert bound == pytest.approx(1.005 * 512, rel=1e-3)  # rounding: B = 1.005·γC
    mu, _ = A.noise_variance_for_epsilon(
        2.0, noisy_clients=100, norm_bound=bound, dimension=8192, sampled=20, population=100,
        sampling="poisson", rounds=20, delta=DELTA,
    )  # fmt: skip
    skellam_z = math.sqrt(100 * mu) / bound

    def general(z: float) -> float:
        rdp = [20 * _zhu_wang_general(int(a), 0.2, z) for a in A.ORDERS]
        return dp_accounting.rdp.compute_epsilon(A.ORDERS, rdp, DELTA)[0]

    def exact(z: float) -> float:
        event = dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(z))
        return gaussian_epsilon(z, 20, event)

    general_z = smallest_noise_multiplier(lambda z: general(z) if z else math.inf, 2.0)[0]
    exact_z = smallest_noise_multiplier(lambda z: exact(z) if z else math.inf, 2.0)[0]
    assert general_z <= skellam_z <= 1.005 * general_z
    assert skellam_z == pytest.approx(4.115, abs=0.01)
    assert exact_z == pytest.approx(2.34, abs=0.01)
    assert general_z > 1.7 * exact_z


# --- μ for a target ε -------------------------------------------------------------------------


@pytest.mark.parametrize("sampled", [50, 10])
def test_noise_variance_for_epsilon_is_the_smallest_that_meets_it(sampled: int) -> None:
    args = dict(rounds=20, delta=DELTA, **_round_args(sampled=sampled, population=200))
    mu, epsilon = A.noise_variance_for_epsilon(3.0, **args)
    assert epsilon <= 3.0 and epsilon == A.skellam_epsilon(mu, **args)
    assert A.skellam_epsilon(0.99 * mu, **args) > 3.0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="orders = .* is not allowed; expected integers >= 2"):
        A.skellam_rdp(np.array([1.5, 2.0]), l1=1.0, l2=1.0, variance=1.0)
    with pytest.raises(ValueError, match="noise_variance = 0.0 is not allowed"):
        A.skellam_epsilon(0.0, rounds=1, delta=DELTA, **_round_args())
    with pytest.raises(ValueError, match="delta = 2.0 is not allowed"):
        A.skellam_epsilon(1.0, rounds=1, delta=2.0, **_round_args())
    with pytest.raises(ValueError, match="sampling = 'bernoulli' is not allowed"):
        A.skellam_epsilon(1.0, rounds=1, delta=DELTA, **_round_args(sampling="bernoulli"))


# --- bytes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits,size", [(1, 9), (16, 1024), (20, 1000), (62, 33)])
def test_pack_bits_round_trip_and_length(bits: int, size: int) -> None:
    values = np.random.default_rng(bits).integers(0, 1 << bits, size, dtype=np.uint64)
    packed = cost.pack_bits(values, bits)
    assert len(packed) == math.ceil(bits * size / 8)
    np.testing.assert_array_equal(cost.unpack_bits(packed, bits, size), values)
    with pytest.raises(ValueError, match="one is >= 2\\^"):
        cost.pack_bits(values + np.uint64(1 << bits), bits)


def test_client_upload_bytes_by_step() -> None:
    sent = cost.client_upload_bytes(padded_dim=1 << 20, bits=20, neighbours=8)
    assert sent.masked_vector == 20 * (1 << 20) // 8
    assert sent.shares == 8 * (2 * 70 + 28) and sent.unmasking == 8 * 70
    assert sent.total == 64 + sent.shares + sent.masked_vector + sent.unmasking
    assert sent.ratio_to_float32(1 << 20) == pytest.approx(20 / 32, rel=1e-3)


# --- the numbers of docs/distributed-dp.md ----------------------------------------------------


def _doc_row(scale: float) -> tuple[float, float, int]:
    """(μ, noise std on the sum / 2C, bits) of the page's table: d = 100,000, C = 1, n = 100,
    t = 67, 100 rounds, ε = 3 at δ = 1e-5 against the server (no sampling, replace-one)."""
    from fedpriv.privacy.distributed import encoding as E

    params = E.EncodingParams(dimension=100_000, clip_norm=1.0, scale=scale, bits=20)
    noisy = A.guaranteed_noisy_clients(67)
    args = dict(noisy_clients=noisy, norm_bound=params.norm_bound, dimension=params.padded_dim)
    mu, _ = A.noise_variance_for_epsilon(
        3.0, sampled=100, population=100, rounds=100, delta=DELTA, **args
    )
    noisy_params = E.EncodingParams(100_000, 1.0, scale, 20, noise_variance=mu)
    return mu, math.sqrt(noisy * mu) / scale / 2.0, E.bits_for(noisy_params, 100)


def test_the_page_numbers_fine_quantisation_reaches_the_gaussian() -> None:
    from fedpriv.privacy.accounting.budget import smallest_noise_multiplier

    gaussian_z, _ = smallest_noise_multiplier(lambda z: gaussian_epsilon(z, 100), 3.0)
    assert gaussian_z == pytest.approx(14.97, abs=0.01)
    mu, z, bits = _doc_row(1024.0)
    assert mu == pytest.approx(1.448e7, rel=2e-3) and z == pytest.approx(15.21, abs=0.01)
    assert bits == 19
    _, fine_z, fine_bits = _doc_row(4096.0)
    assert gaussian_z <= fine_z <= 1.005 * gaussian_z and fine_bits == 21
    assert _doc_row(64.0)[1] > 3 * gaussian_z  # coarse rounding: B >> γC inflates the noise
