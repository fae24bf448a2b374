"""Tests for fedpriv.privacy.distributed's encoding: rotation, rounding, Skellam noise, Z_m,
and the client-to-server round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import linalg, special, stats

from fedpriv.privacy.distributed import encoding as E
from fedpriv.privacy.distributed import quantize as Q
from fedpriv.privacy.distributed import rotation as R

# --- rotation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 16, 128])
def test_walsh_hadamard_is_the_dense_normalised_hadamard_matrix(size: int) -> None:
    vector = np.random.default_rng(size).normal(size=size)
    dense = linalg.hadamard(size) @ vector / math.sqrt(size)
    np.testing.assert_allclose(R.walsh_hadamard(vector), dense, atol=1e-12)


def test_rotation_is_orthonormal_and_inverted() -> None:
    rng = np.random.default_rng(0)
    vector = rng.normal(size=1000)
    signs = R.rotation_signs(7, R.padded_dimension(1000))
    rotated = R.rotate(vector, signs)
    assert rotated.size == 1024
    assert np.linalg.norm(rotated) == pytest.approx(np.linalg.norm(vector), rel=1e-12)
    np.testing.assert_allclose(R.unrotate(rotated, signs, 1000), vector, atol=1e-12)


def test_rotation_flattens_a_spike() -> None:
    spike = np.zeros(4096)
    spike[3] = 1.0
    rotated = R.rotate(spike, R.rotation_signs(1, 4096))
    assert np.max(np.abs(rotated)) == pytest.approx(1 / 64)  # every coordinate ±1/√d


def test_padded_dimension_and_sign_checks() -> None:
    assert [R.padded_dimension(d) for d in (1, 2, 3, 1024, 1025)] == [1, 2, 4, 1024, 2048]
    with pytest.raises(ValueError, match="padded_dim = 12 is not allowed; expected a power of 2"):
        R.rotation_signs(0, 12)
    signs = R.rotation_signs(3, 64)
    assert set(np.unique(signs)) == {-1.0, 1.0}
    np.testing.assert_array_equal(signs, R.rotation_signs(3, 64))


# --- clipping and conditional rounding --------------------------------------------------------


def test_clip_l2_bounds_the_norm_and_refuses_nan() -> None:
    vector = np.arange(10.0)
    assert np.linalg.norm(Q.clip_l2(vector, 2.0)) == pytest.approx(2.0)
    np.testing.assert_array_equal(Q.clip_l2(vector, 100.0), vector)
    with pytest.raises(ValueError, match="NaN or Inf"):
        Q.clip_l2(np.array([1.0, np.nan]), 1.0)
    with pytest.raises(ValueError, match="clip_norm = 0"):
        Q.clip_l2(vector, 0)


def test_rounded_norm_bound_is_kls_theorem_1() -> None:
    c, d, beta = 30.0, 256, math.exp(-0.5)
    by_hand = math.sqrt(c**2 + d / 4 + math.sqrt(2 * 0.5) * (c + math.sqrt(d) / 2))
    assert Q.rounded_norm_bound(c, d, beta) == pytest.approx(by_hand, rel=1e-14)
    assert Q.rounded_norm_bound(c, d, 0.0) == pytest.approx(c + 16.0)
    assert Q.rounded_norm_bound(c, d, 0.9) < Q.rounded_norm_bound(c, d, 0.1)


def test_conditional_rounding_meets_its_bound_and_is_nearly_unbiased() -> None:
    rng = np.random.default_rng(0)
    scaled = rng.normal(size=64) * 3.0
    bound = Q.rounded_norm_bound(float(np.linalg.norm(scaled)), 64, 0.5)
    draws = [Q.conditional_round(scaled, bound, rng) for _ in range(2000)]
    assert all(np.linalg.norm(d.values) <= bound for d in draws)
    assert all(np.all(np.abs(d.values - scaled) < 1) for d in draws)
    mean = np.mean([d.values for d in draws], axis=0)
    assert np.max(np.abs(mean - scaled)) < 0.1  # per-coordinate std of the mean ~ 0.011


def test_conditional_rounding_retries_and_reports_the_draws() -> None:
    rng = np.random.default_rng(1)
    scaled = np.full(400, 0.5)  # ‖x‖ = 10; one draw's norm² ~ Binomial(400, 1/2)
    tight = math.sqrt(200)  # met by about half the draws
    tries = [Q.conditional_round(scaled, tight, rng).tries for _ in range(200)]
    assert max(tries) > 1 and 1.5 < np.mean(tries) < 2.6
    with pytest.raises(RuntimeError, match="did not meet norm_bound"):
        Q.conditional_round(scaled, 10.0, rng, max_tries=5)
    with pytest.raises(ValueError, match="norm_bound = 9.0 is not allowed"):
        Q.conditional_round(scaled, 9.0, rng)


# --- Skellam noise and Z_m --------------------------------------------------------------------


def test_skellam_noise_has_the_skellam_pmf() -> None:
    mu = 6.0
    draws = Q.skellam_noise(200_000, mu, np.random.default_rng(2))
    assert draws.dtype == np.int64
    ks = np.arange(-12, 13)
    pmf = special.ive(np.abs(ks), mu)  # e^{-μ} I_k(μ): Sk(μ/2, μ/2)
    observed = np.array([(draws == k).sum() for k in ks])
    outside = draws.size - observed.sum()
    chi2 = stats.chisquare(np.append(observed, outside), draws.size * np.append(pmf, 1 - pmf.sum()))
    assert chi2.pvalue > 1e-3
    assert draws.var() == pytest.approx(mu, rel=0.02)


def test_skellam_shares_add_up_to_the_total_variance() -> None:
    rng = np.random.default_rng(3)
    total = sum(Q.skellam_noise(100_000, 2.5, rng) for _ in range(8))
    assert total.var() == pytest.approx(20.0, rel=0.03)
    assert not Q.skellam_noise(5, 0.0, rng).any()


def test_ring_round_trip_and_wrap() -> None:
    bits = 8
    values = np.arange(-128, 128)
    ring = Q.to_ring(values, bits)
    assert ring.dtype == np.uint64 and ring.min() == 0 and ring.max() == 255
    np.testing.assert_array_equal(Q.centred(ring, bits), values)
    np.testing.assert_array_equal(
        Q.centred(Q.to_ring(np.array([128, -129]), bits), bits), [-128, 127]
    )
    with pytest.raises(ValueError, match="bits = 63 is not allowed"):
        Q.to_ring(values, 63)


# --- the round trip ---------------------------------------------------------------------------


def _params(**overrides) -> E.EncodingParams:
    values = dict(dimension=300, clip_norm=1.0, scale=100.0, bits=40, rotation_seed=5)
    values.update(overrides)
    return E.EncodingParams(**values)


def _updates(n: int, dimension: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=dimension) * (0.02 + 0.2 * i) for i in range(n)]


def _ring_sum(encoded: list[E.EncodedUpdate], bits: int) -> np.ndarray:
    total = np.zeros_like(encoded[0].values)
    for update in encoded:
        total = (total + update.values) & np.uint64((1 << bits) - 1)
    return total


def _sum_error(scale: float, seed: int = 0) -> float:
    params = _params(scale=scale)
    updates = _updates(5, params.dimension)
    rng = np.random.default_rng(seed)
    decoded = E.decode_sum(_ring_sum([E.encode(x, params, rng) for x in updates], 40), params)
    exact = sum(Q.clip_l2(x, params.clip_norm) for x in updates)
    return float(np.linalg.norm(decoded - exact))


def test_round_trip_without_noise_is_within_the_rounding_bound() -> None:
    params = _params()
    error = _sum_error(params.scale)
    assert error <= 5 * math.sqrt(params.padded_dim) / params.scale  # < 1 per coordinate
    assert 0.0 < error


def test_round_trip_error_shrinks_with_the_scale() -> None:
    coarse, fine = _sum_error(10.0), _sum_error(1000.0)
    assert fine < coarse / 30  # error ~ 1/γ


def test_encode_is_deterministic_given_the_seed_and_reports_clipping() -> None:
    params = _params(noise_variance=4.0)
    update = _updates(3, params.dimension)[2]
    first = E.encode(update, params, np.random.default_rng(9))
    again = E.encode(update, params, np.random.default_rng(9))
    np.testing.assert_array_equal(first.values, again.values)
    assert first.clipped and first.norm_bound == params.norm_bound and first.tries >= 1
    assert not E.encode(update * 1e-3, params, np.random.default_rng(9)).clipped


def test_decoded_noise_has_the_survivors_variance() -> None:
    params = _params(dimension=4096, scale=10.0, noise_variance=50.0, bits=30)
    zeros = np.zeros(params.dimension)
    rng = np.random.default_rng(4)
    encoded = [E.encode(zeros, params, rng) for _ in range(4)]
    mean = E.decode_mean(_ring_sum(encoded, 30), params, survivors=4)
    expected = 4 * 50.0 / params.scale**2 / 16  # (n·μ/γ²)/n²
    assert mean.var() == pytest.approx(expected, rel=0.1)


def test_bits_for_avoids_wrap_around_and_fewer_bits_wrap() -> None:
    params = _params(scale=50.0, noise_variance=20.0)
    updates = _updates(8, params.dimension, seed=1)
    bits = E.bits_for(params, 8)

    def decoded(b: int) -> np.ndarray:
        p = _params(scale=50.0, noise_variance=20.0, bits=b)
        rng = np.random.default_rng(6)
        return E.decode_sum(_ring_sum([E.encode(x, p, rng) for x in updates], b), p)

    np.testing.assert_allclose(decoded(bits), decoded(40), atol=1e-9)
    assert np.linalg.norm(decoded(bits - 4) - decoded(40)) > 2.0  # wrapped: off by ~5


def test_encoding_params_and_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="bits = 63 is not allowed"):
        _params(bits=63)
    with pytest.raises(ValueError, match="scale = 0 is not allowed"):
        _params(scale=0)
    with pytest.raises(ValueError, match="len\\(update\\) = 3 is not allowed"):
        E.encode(np.zeros(3), _params(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="ring_sum.shape"):
        E.decode_sum(np.zeros(300, dtype=np.uint64), _params())
