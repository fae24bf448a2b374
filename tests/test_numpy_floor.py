"""The numpy floor of ``make bench`` (bench/numpy_floor.py) against the plain-Keras floor,
and the floors' server side (bench/floor_rounds.py)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import floor_rounds, numpy_floor

SMALL = {
    "dataset": "digits",
    "partition": "iid",
    "model": "digits-mlp",
    "num-clients": 10,
    "clients-per-round": 0,
    "seed": 3,
    "local-epochs": 5,
    "batch-size": 8,
    "optimizer": "sgd",
    "learning-rate": 0.02,
    "num-server-rounds": 5,
    "privacy": "none",
    "floor-client-eval": False,
}


def _finite_difference(weights, x, y, idx, mask, lr, k, pos, eps=1e-3):
    """One SGD step's change of weight ``k`` at ``pos`` from a central difference of the
    masked mean loss (float64), to check the hand-written gradient independently."""
    w64 = [np.asarray(w, np.float64) for w in weights]
    rows, m = idx[0], mask[0]

    def loss(ws):
        _, p = numpy_floor.forward(ws, x[rows].astype(np.float64))
        return -(np.log(p[np.arange(len(rows)), y[rows]]) * m).sum() / m.sum()

    up, down = [w.copy() for w in w64], [w.copy() for w in w64]
    up[k][pos] += eps
    down[k][pos] -= eps
    return -lr * (loss(up) - loss(down)) / (2 * eps)


def test_numpy_step_matches_a_finite_difference_gradient():
    from bench.tf_floor import batch_schedule

    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 64)).astype(np.float32)
    y = rng.integers(0, 10, size=6)
    w = numpy_floor.glorot_weights(64, 64, 10, seed=1)
    w[1] += 0.05  # biases off zero: most hidden units active
    idx, mask = batch_schedule(6, 8, 1, seed=0)
    mask[0, -1] = 0.0  # a padded row must not count
    new = numpy_floor.train_client(w, x, y, idx[:1], mask[:1], lr=0.5)
    for k, pos in ((0, (3, 5)), (1, (7,)), (2, (11, 4)), (3, (2,))):
        expected = _finite_difference(w, x, y, idx, mask, 0.5, k, pos)
        assert new[k][pos] - w[k][pos] == pytest.approx(expected, rel=1e-2, abs=1e-6)


def test_global_dp_aggregate_clips_each_update_and_adds_sigma_zc_over_m():
    base = [np.zeros((3, 2), np.float32), np.zeros(2, np.float32)]
    far = [np.full((3, 2), 10.0, np.float32), np.full(2, 10.0, np.float32)]  # norm 10*sqrt(8)
    out = floor_rounds.aggregate([far, far], [1, 3], base, (0.0, 2.0), np.random.default_rng(0))
    assert np.sqrt(sum((w.astype(np.float64) ** 2).sum() for w in out)) == pytest.approx(2.0)
    big = [np.zeros((400, 250), np.float32)]
    noisy = floor_rounds.aggregate([big] * 4, [1] * 4, big, (1.5, 2.0), np.random.default_rng(1))
    assert noisy[0].std() == pytest.approx(1.5 * 2.0 / 4, rel=0.02)


def test_sample_clients_is_seeded_without_replacement():
    a = floor_rounds.sample_clients(100, 20, seed=0, rnd=3)
    assert a == floor_rounds.sample_clients(100, 20, seed=0, rnd=3)
    assert len(set(a)) == 20 and a != floor_rounds.sample_clients(100, 20, seed=0, rnd=4)
    assert floor_rounds.sample_clients(10, 0, seed=0, rnd=1) == list(range(10))


def test_numpy_floor_trains_as_the_keras_floor_from_the_same_weights():
    """Same shards, batches, start weights: final weights agree to float32 rounding, and the
    accuracy is in the Keras floor's band (and well above chance, 0.1)."""
    import keras

    from bench.tf_floor import run as keras_run
    from fedpriv.models import build_model

    start = build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10, seed=3)
    start = start.get_weights()
    ours = numpy_floor.run(SMALL, weights=start)
    theirs = keras_run(SMALL)  # builds the same seed-3 weights itself
    assert keras.backend.backend() in ("tensorflow", "jax")
    assert ours["accuracy"] > 0.5
    assert ours["accuracy"] == pytest.approx(theirs["accuracy"], abs=0.03)
    assert ours["loss"] == pytest.approx(theirs["loss"], rel=0.02)
    assert ours["calls"] == 5 * 10 and len(ours["round_stamps"]) == 5


def test_floors_refuse_other_privacy_and_models_in_one_line():
    with pytest.raises(ValueError, match="privacy = 'metric-dp' is not allowed"):
        floor_rounds.dp_setting({"privacy": "metric-dp"})
    with pytest.raises(ValueError, match="model = 'mp-cnn' is not allowed"):
        numpy_floor.run({**SMALL, "model": "mp-cnn"})
