"""fedpriv.clients.dp_grads.private_grads on TensorFlow (this process) and JAX (a subprocess).

Reference: per-example gradients of a one-hidden-layer tanh MLP with softmax cross-entropy
written out by hand in numpy (backpropagation, no autodiff), clipped to C one by one over
the flat parameter vector, summed over the real (mask 1) rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import dp_grads_case as case

ROOT = Path(__file__).resolve().parents[1]


def _numpy_example(params, x_i, y_i) -> tuple[float, np.ndarray]:
    """ℓ_i and ∇ℓ_i (flat, W1 b1 W2 b2 order) of one example, by hand."""
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    h = np.tanh(x_i @ w1 + b1)
    logits = h @ w2 + b2
    p = np.exp(logits - logits.max())
    p /= p.sum()
    d_logits = p.copy()
    d_logits[y_i] -= 1.0
    d_z1 = (d_logits @ w2.T) * (1.0 - h**2)
    grads = [np.outer(x_i, d_z1), d_z1, np.outer(h, d_logits), d_logits]
    return float(-np.log(p[y_i])), np.concatenate([g.ravel() for g in grads])


def _numpy_reference() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Σ_i m_i clip(∇ℓ_i, C), the per-example losses and the unclipped gradient norms."""
    params = case.params()
    x, y, mask = case.batch()
    total = np.zeros(sum(p.size for p in params))
    losses, norms = [], []
    for i in range(len(x)):
        loss, grad = _numpy_example(params, x[i].astype(np.float64), int(y[i]))
        norm = np.linalg.norm(grad)
        total += mask[i] * grad * min(1.0, case.CLIP / norm)
        losses.append(loss)
        norms.append(norm)
    return total, np.array(losses), np.array(norms)


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    tf_result = case.run_case()
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "dp_grads_case.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {"tensorflow": tf_result, "jax": json.loads(out.stdout)}


def test_the_case_clips_some_examples_and_has_padding():
    _, _, norms = _numpy_reference()
    x, y, mask = case.batch()
    real = norms[mask == 1]
    assert (real > case.CLIP).any() and (real < case.CLIP).any()
    assert (mask == 0).sum() == 3


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_zero_noise_equals_the_numpy_per_example_computation(results, backend):
    result = results[backend]
    assert result["backend"] == backend
    expected, losses, _ = _numpy_reference()
    np.testing.assert_allclose(result["clipped_sum"], expected, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(result["losses"], losses, rtol=2e-5, atol=2e-6)


def test_tensorflow_and_jax_give_the_same_clipped_sum(results):
    np.testing.assert_allclose(
        results["tensorflow"]["clipped_sum"], results["jax"]["clipped_sum"], atol=2e-6
    )


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_noise_is_centred_gaussian_with_std_z_times_clip(results, backend):
    r = np.asarray(results[backend]["residuals"]).ravel()
    sigma = case.Z * case.CLIP
    n = r.size  # 40 draws x 39 parameters
    # std of the sample std ≈ σ/√(2n); mean's std = σ/√n; 5 standard errors each
    assert abs(r.std() / sigma - 1.0) < 5.0 / np.sqrt(2 * n)
    assert abs(r.mean()) < 5.0 * sigma / np.sqrt(n)
    # each draw is one vector over all tensors: no two parameters share a draw
    draws = np.asarray(results[backend]["residuals"])
    assert len(np.unique(np.round(draws[0], 6))) == draws.shape[1]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_secret_seeds_differ_and_the_opt_in_seed_is_bit_identical(results, backend):
    assert results[backend]["secret_differ"]
    assert results[backend]["opt_in_identical"]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_an_all_padding_batch_has_zero_data_gradient(results, backend):
    assert results[backend]["empty_batch_max"] == 0.0


def test_bad_clip_and_noise_are_named():
    from fedpriv.clients.dp_grads import private_grads

    kwargs = dict(denominator=1.0, noise_seed=np.zeros(2, np.int32))
    x, y, mask = case.batch()
    with pytest.raises(ValueError, match="l2_norm_clip = 0"):
        private_grads(None, [], x, y, mask, l2_norm_clip=0, noise_multiplier=1.0, **kwargs)
    with pytest.raises(ValueError, match="noise_multiplier = -1"):
        private_grads(None, [], x, y, mask, l2_norm_clip=1.0, noise_multiplier=-1, **kwargs)


def test_secret_seed_is_fresh_entropy():
    from fedpriv.clients.dp_grads import secret_seed

    seeds = {tuple(secret_seed()) for _ in range(20)}
    assert len(seeds) == 20
    assert secret_seed().shape == (2,) and secret_seed().dtype == np.int32
