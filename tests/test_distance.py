"""Tests for fedpriv.privacy.distance: the metric-privacy distance d (SPEC §3.2)."""

from __future__ import annotations

import numpy as np
import pytest

from fedpriv.privacy import distance as D

SHAPES = [(3, 3, 2, 4), (4,), (36, 7), (7,)]  # conv kernel, bias, dense, bias


def _models(m: int, scale: float, seed: int, base_scale: float = 1.0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    base = [base_scale + rng.normal(size=s) for s in SHAPES]
    return [[(b + scale * rng.normal(size=b.shape)).astype(dtype) for b in base] for _ in range(m)]


@pytest.mark.parametrize("m", [2, 3, 10])
@pytest.mark.parametrize("scale", [1.0, 1e-3])
def test_vectorized_matches_naive_loop(m: int, scale: float) -> None:
    models = _models(m, scale, seed=m)
    fast = D.max_pairwise_layer_distance(models)
    slow = D.naive_max_pairwise_layer_distance(models)
    assert fast > 0
    assert fast == pytest.approx(slow, rel=1e-6)
    # Chunked Gram (tiny chunks) gives the same answer.
    assert D.max_pairwise_layer_distance(models, chunk_elements=7) == pytest.approx(slow, rel=1e-6)


@pytest.mark.parametrize(
    ("dtype", "base_scale", "scale"),
    [(np.float32, 1.0, 1e-6), (np.float64, 1e3, 1e-7), (np.float64, 1e4, 1e-9)],
)
def test_near_identical_models_stay_accurate(dtype, base_scale: float, scale: float) -> None:
    # ||a||^2 >> ||a-b||^2: an uncentred Gram identity loses every significant digit here.
    models = _models(6, scale, seed=5, base_scale=base_scale, dtype=dtype)
    slow = D.naive_max_pairwise_layer_distance(models)
    assert slow > 0
    assert D.max_pairwise_layer_distance(models) == pytest.approx(slow, rel=1e-6)
    full = D.pairwise_layer_distances(models)
    i, j = 1, 4
    manual = np.mean(
        [np.linalg.norm(np.subtract(a, b, dtype=np.float64)) for a, b in zip(models[i], models[j])]
    )
    assert full[i, j] == pytest.approx(manual, rel=1e-6)


def test_known_value_and_matrix_properties() -> None:
    a = [np.zeros(2), np.zeros((2, 2))]
    b = [np.array([3.0, 0.0]), np.array([[0.0, 5.0], [0.0, 0.0]])]  # layer norms 3 and 5
    c = [np.array([0.0, 1.0]), np.zeros((2, 2))]
    assert D.max_pairwise_layer_distance([a, b]) == pytest.approx(4.0, rel=1e-12)
    mat = D.pairwise_layer_distances([a, b, c])
    expected_bc = (np.hypot(3, 1) + 5) / 2
    np.testing.assert_allclose(
        mat, [[0, 4, 0.5], [4, 0, expected_bc], [0.5, expected_bc, 0]], rtol=1e-12, atol=1e-12
    )
    assert np.array_equal(mat, mat.T) and np.all(np.diag(mat) == 0)
    assert D.max_pairwise_layer_distance([a, b, c]) == pytest.approx(expected_bc, rel=1e-12)


def test_degenerate_inputs_give_zero() -> None:
    one = _models(1, 1.0, seed=0)
    assert D.max_pairwise_layer_distance([]) == 0.0
    assert D.max_pairwise_layer_distance(one) == 0.0
    assert D.naive_max_pairwise_layer_distance(one) == 0.0
    assert D.pairwise_layer_distances(one).shape == (1, 1)
    same = [one[0], [a.copy() for a in one[0]], [a.copy() for a in one[0]]]
    assert D.max_pairwise_layer_distance(same) == 0.0


def test_ragged_input_names_client_and_layer() -> None:
    models = _models(3, 1.0, seed=1)
    fewer = [models[0], models[1], models[2][:-1]]
    with pytest.raises(ValueError, match="client 2 has 3 layers"):
        D.max_pairwise_layer_distance(fewer)
    wrong = [models[0], [models[1][0], np.zeros(5, np.float32), *models[1][2:]], models[2]]
    with pytest.raises(ValueError, match=r"client 1 layer 1 has shape \(5,\)"):
        D.max_pairwise_layer_distance(wrong)
    with pytest.raises(ValueError, match="client 1 layer 1"):
        D.naive_max_pairwise_layer_distance(wrong)
    with pytest.raises(ValueError, match="no layers"):
        D.max_pairwise_layer_distance([[], []])


def test_non_finite_values_raise() -> None:
    models = _models(3, 1.0, seed=2)
    models[2][3][0] = np.nan
    with pytest.raises(ValueError, match="client 2 layer 3"):
        D.max_pairwise_layer_distance(models)
    with pytest.raises(ValueError, match="non-finite"):
        D.naive_max_pairwise_layer_distance(models)
