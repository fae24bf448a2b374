"""Tests for fedpriv.privacy.mechanisms: FlatClip/Gaussian vs Flower, Laplace in R^n, GP
sanitization."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
from scipy import stats

from fedpriv.privacy import mechanisms as M
from tests.flower_reference import dp_helpers

SHAPES = [(3, 3, 1, 8), (8,), (50, 10), (10,)]


def _model(rng: np.random.Generator, scale: float = 1.0, dtype=np.float32) -> list[np.ndarray]:
    return [(scale * rng.normal(size=s)).astype(dtype) for s in SHAPES]


# --- FlatClip / Gaussian vs Flower ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_clip_model_to_reference_is_bit_identical_to_flower(seed: int) -> None:
    dp = dp_helpers()
    rng = np.random.default_rng(seed)
    ref = _model(rng)
    clipping_norm = [0.1, 1.0, 5.0, 100.0][seed % 4]
    model = [r + (0.01 + seed) * rng.normal(size=r.shape).astype(np.float32) for r in ref]
    model_before = [a.copy() for a in model]
    ref_before = [a.copy() for a in ref]

    mine, was_clipped = M.clip_model_to_reference(model, ref, clipping_norm)

    theirs = [a.copy() for a in model]
    dp.compute_clip_model_update(theirs, ref, clipping_norm)
    for a, b in zip(mine, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    update_norm = dp.get_norm([np.subtract(x, y) for x, y in zip(model, ref)])
    assert was_clipped == (update_norm > clipping_norm)
    for a, b in zip(model, model_before):  # inputs untouched
        np.testing.assert_array_equal(a, b)
    for a, b in zip(ref, ref_before):
        np.testing.assert_array_equal(a, b)


def test_clip_update_scales_to_clipping_norm_and_reports_it() -> None:
    rng = np.random.default_rng(0)
    update = _model(rng, dtype=np.float64)
    norm = M.flat_norm(update)
    assert norm == pytest.approx(math.sqrt(sum(float(np.sum(a**2)) for a in update)), rel=1e-12)

    clipped, was_clipped = M.clip_update(update, norm / 4)
    assert was_clipped
    assert M.flat_norm(clipped) == pytest.approx(norm / 4, rel=1e-12)
    for a, b in zip(clipped, update):  # same direction: a = b/4
        np.testing.assert_allclose(a, b / 4, rtol=1e-12)

    same, was_clipped = M.clip_update(update, norm * 2)
    assert not was_clipped
    for a, b in zip(same, update):
        assert a is not b
        np.testing.assert_array_equal(a, b)


def test_clip_update_zero_update_is_unchanged_and_bad_inputs_raise() -> None:
    zeros = [np.zeros((2, 3), np.float32), np.zeros(3, np.float32)]
    out, was_clipped = M.clip_update(zeros, 1.0)
    assert not was_clipped
    assert all(np.array_equal(a, b) for a, b in zip(out, zeros))
    with pytest.raises(ValueError, match="clipping_norm"):
        M.clip_update(zeros, 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        M.clip_update([np.array([np.nan, 1.0])], 1.0)
    with pytest.raises(ValueError, match="layer 1"):
        M.clip_model_to_reference([np.zeros(2), np.zeros(3)], [np.zeros(2), np.zeros(4)], 1.0)


@pytest.mark.parametrize(
    ("z", "c", "m"), [(0.01, 5.0, 4), (1.0, 1.0, 1), (1.1, 0.5, 10), (0.0, 3.0, 7), (2.5, 10, 3)]
)
def test_gaussian_stdv_equals_flower_compute_stdv(z: float, c: float, m: int) -> None:
    dp = dp_helpers()
    assert M.gaussian_stdv(z, c, m) == dp.compute_stdv(z, c, m)
    d = 0.37
    assert M.metric_stdv(z, c, m, d) == dp.compute_stdv(z / d, c, m)
    assert M.metric_stdv(z, c, m, d) == pytest.approx(z * c / (m * d), rel=1e-12)


def test_stdv_argument_errors() -> None:
    with pytest.raises(ValueError, match="num_sampled_clients"):
        M.gaussian_stdv(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        M.gaussian_stdv(-1.0, 1.0, 2)
    with pytest.raises(ValueError, match="distance"):
        M.metric_stdv(1.0, 1.0, 2, 0.0)
    with pytest.raises(ValueError, match="distance"):
        M.metric_stdv(1.0, 1.0, 2, float("nan"))


def test_add_gaussian_noise_reproducible_dtype_and_std() -> None:
    arrays = [np.ones((300, 400), np.float32), np.zeros(80_000, np.float64)]
    before = [a.copy() for a in arrays]
    a = M.add_gaussian_noise(arrays, 0.5, np.random.default_rng(42))
    b = M.add_gaussian_noise(arrays, 0.5, np.random.default_rng(42))
    c = M.add_gaussian_noise(arrays, 0.5, np.random.default_rng(43))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    for x, y in zip(arrays, before):
        np.testing.assert_array_equal(x, y)
    assert [x.dtype for x in a] == [np.float32, np.float64]
    # Layer-by-layer draws with rng.normal(0, stdv, shape), cast to the layer dtype.
    rng = np.random.default_rng(42)
    expected0 = 1 + rng.normal(0, 0.5, (300, 400)).astype(np.float32)
    np.testing.assert_array_equal(a[0], expected0)
    noise = np.concatenate([(a[0] - 1).ravel(), a[1].ravel()]).astype(np.float64)
    # 200k draws: the std estimate has relative SE ~0.16%; band 1%.
    assert noise.std() == pytest.approx(0.5, rel=0.01)
    assert abs(noise.mean()) < 0.01
    zero = M.add_gaussian_noise(arrays, 0.0, np.random.default_rng(1))
    np.testing.assert_array_equal(zero[0], arrays[0])
    with pytest.raises(ValueError, match="rng"):
        M.add_gaussian_noise(arrays, 0.5, 42)  # type: ignore[arg-type]


# --- Laplace in R^n -----------------------------------------------------------------------------


def _draws(n: int, eps: float, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([M.sample_laplace_rn(n, eps, rng) for _ in range(count)])


@pytest.mark.parametrize(("n", "eps", "count"), [(2, 0.5, 20_000), (1000, 3.0, 2_000)])
def test_laplace_rn_radius_mean_and_variance(n: int, eps: float, count: int) -> None:
    rho = _draws(n, eps, count, seed=7)
    assert rho.dtype == np.float64 and rho.shape == (count, n)
    radii = np.linalg.norm(rho, axis=1)
    # Radius ~ Gamma(shape=n, scale=1/eps) (GP Prop 3.1 item 2).
    assert stats.kstest(radii, stats.gamma(a=n, scale=1 / eps).cdf).pvalue > 0.01
    # A wrong shape (n-1 or n+1) is rejected at these sample sizes for n = 2.
    if n == 2:
        assert stats.kstest(radii, stats.gamma(a=n + 1, scale=1 / eps).cdf).pvalue < 1e-6
        assert stats.kstest(radii, stats.gamma(a=n - 1, scale=1 / eps).cdf).pvalue < 1e-6
    # E||rho|| = n/eps; SE = sqrt(n)/eps/sqrt(count).
    se = math.sqrt(n) / eps / math.sqrt(count)
    assert abs(radii.mean() - n / eps) < 4 * se
    # Per-component variance (n+1)/eps^2 (= E[r^2]/n).
    var = float(np.mean(rho**2))
    assert var == pytest.approx((n + 1) / eps**2, rel=0.04 if n == 2 else 0.02)


@pytest.mark.parametrize(("n", "count"), [(2, 20_000), (1000, 2_000)])
def test_laplace_rn_is_isotropic(n: int, count: int) -> None:
    rho = _draws(n, 1.0, count, seed=11)
    u = rho / np.linalg.norm(rho, axis=1, keepdims=True)
    mean_dir = u.mean(axis=0)
    # For uniform directions ||mean u|| ~ 1/sqrt(count); a biased sampler gives O(1).
    assert np.linalg.norm(mean_dir) < 4 / math.sqrt(count)
    # Second moment E[u u^T] = I/n: each E[u_i^2] = 1/n, with SD(u_i^2) <= sqrt(2)/n.
    worst = np.max(np.abs((u**2).mean(axis=0) - 1 / n))
    assert worst < 6 * math.sqrt(2) / (n * math.sqrt(count))
    if n == 2:
        angles = np.arctan2(u[:, 1], u[:, 0])
        uniform = stats.uniform(loc=-math.pi, scale=2 * math.pi)
        assert stats.kstest(angles, uniform.cdf).pvalue > 0.01


def test_laplace_rn_dim_one_is_classic_laplace() -> None:
    x = _draws(1, 2.0, 20_000, seed=3)[:, 0]
    assert stats.kstest(x, stats.laplace(scale=0.5).cdf).pvalue > 0.01


def test_laplace_rn_reproducible_and_argument_errors() -> None:
    a = M.sample_laplace_rn(50, 1.5, np.random.default_rng(5))
    b = M.sample_laplace_rn(50, 1.5, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    # Radius first (gamma), direction second (standard normal), in float64.
    rng = np.random.default_rng(5)
    r = rng.gamma(50.0, 1 / 1.5)
    g = rng.standard_normal(50)
    np.testing.assert_allclose(a, r * g / np.linalg.norm(g), rtol=1e-12)
    rng = np.random.default_rng(0)
    for dim in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="dim"):
            M.sample_laplace_rn(dim, 1.0, rng)  # type: ignore[arg-type]
    for eps in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="epsilon"):
            M.sample_laplace_rn(3, eps, rng)


def test_laplace_epsilon_formula() -> None:
    assert M.laplace_epsilon(2, 5.0, 0.1) == pytest.approx(2 / (5 * 0.1))
    assert M.laplace_epsilon(2, 5.0, 0.0) == math.inf
    with pytest.raises(ValueError, match="noise_multiplier"):
        M.laplace_epsilon(2, 0.0, 1.0)
    with pytest.raises(ValueError, match="delta_norm"):
        M.laplace_epsilon(2, 1.0, -1.0)


# --- GP Algorithm 2 ---------------------------------------------------------------------------


def test_sanitize_laplace_gp_synthetic_leakage_and_noise() -> None:
    theta_ref = [np.array([5.0, 6.0])]
    theta_local = [np.array([5.3, 5.6])]  # delta = (0.3, -0.4), ||delta|| = 0.5
    out, info = M.sanitize_laplace(theta_local, theta_ref, 5.0, np.random.default_rng(0))
    assert info["dim"] == 2
    assert info["leakage"] == 0.4  # n / nu = 2/5 exactly (GP §4.1)
    assert info["delta_norm"] == pytest.approx(0.5, rel=1e-12)
    assert info["epsilon"] == pytest.approx(2 / (5 * 0.5), rel=1e-12)
    assert info["epsilon"] * info["delta_norm"] == pytest.approx(0.4, rel=1e-12)
    assert info["noise_norm"] == pytest.approx(np.linalg.norm(out[0] - theta_local[0]), rel=1e-9)
    # Same rng stream as a direct draw of rho.
    rho = M.sample_laplace_rn(2, info["epsilon"], np.random.default_rng(0))
    np.testing.assert_allclose(out[0], theta_local[0] + rho, rtol=1e-12)
    # E||rho|| = n/eps = nu * ||delta|| = 2.5 over many sanitizations.
    rng = np.random.default_rng(1)
    norms = [
        M.sanitize_laplace(theta_local, theta_ref, 5.0, rng)[1]["noise_norm"] for _ in range(4000)
    ]
    se = math.sqrt(2) / info["epsilon"] / math.sqrt(4000)
    assert abs(np.mean(norms) - 2.5) < 4 * se


def test_sanitize_laplace_keeps_shapes_dtypes_and_uses_all_layers() -> None:
    rng = np.random.default_rng(2)
    ref = _model(rng)
    local = [r + 0.01 * rng.normal(size=r.shape).astype(np.float32) for r in ref]
    n = sum(a.size for a in ref)
    out, info = M.sanitize_laplace(local, ref, 1.0, np.random.default_rng(3))
    assert [a.shape for a in out] == [a.shape for a in local]
    assert all(a.dtype == np.float32 for a in out)
    assert info["dim"] == n and info["leakage"] == n / 1.0
    delta = np.concatenate([(x.astype(np.float64) - y).ravel() for x, y in zip(local, ref)])
    assert info["delta_norm"] == pytest.approx(np.linalg.norm(delta), rel=1e-12)
    changed = [not np.array_equal(a, b) for a, b in zip(out, local)]
    assert all(changed)  # noise reaches every layer


def test_sanitize_laplace_special_cases() -> None:
    ref = [np.zeros(3), np.ones((2, 2))]
    local = [np.array([0.1, 0.0, 0.0]), np.ones((2, 2))]
    out, info = M.sanitize_laplace(local, ref, 0.0, np.random.default_rng(0))
    assert info["leakage"] is None and info["epsilon"] is None and info["noise_norm"] == 0.0
    assert all(np.array_equal(a, b) for a, b in zip(out, local))
    out, info = M.sanitize_laplace(ref, ref, 2.0, np.random.default_rng(0))
    assert info["epsilon"] == math.inf and info["leakage"] == 7 / 2.0
    assert all(np.array_equal(a, b) for a, b in zip(out, ref))
    with pytest.raises(ValueError, match="layer 1"):
        M.sanitize_laplace([np.zeros(3), np.zeros(2)], ref, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="layers"):
        M.sanitize_laplace([np.zeros(3)], ref, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="non-finite"):
        M.sanitize_laplace(
            [np.array([np.inf, 0, 0]), np.ones((2, 2))], ref, 1.0, np.random.default_rng(0)
        )
