"""Compiled local training (clients/compiled.py) against independent eager reference loops.

The reference loops below share no code with the trainer nor with the Keras model: they
draw the same batches (epoch e uses the e-th ``rng.permutation(n)`` of
``np.random.default_rng(seed)``, cut in order into batches of ``min(B, n)``, last batch
short), run the digits MLP as a hand-written ``keras.ops`` forward pass, take gradients with
a GradientTape (TF) or ``jax.grad`` (JAX) per batch (per example for DP-SGD) and apply plain
SGD by hand. The same small training on both backends is in test_backends_agree.py.
"""

import math
from dataclasses import dataclass

import keras
import numpy as np
import pytest
from fedpriv.clients.compiled import CompiledTrainer, DpStepConfig, Schedule, batch_schedule
from fedpriv.clients.keras_client import (
    TrainSettings,
    evaluate_local,
    predict_proba,
    train_local,
    trainer_for,
)
from keras import ops

from fedpriv.models import build_model

LR = 0.05


def _data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, size=n).astype(np.int64)
    return x, y


def _model() -> keras.Model:
    return build_model(
        "digits-mlp", input_shape=(8, 8, 1), num_classes=10, optimizer="sgd", learning_rate=LR
    )


def _weights(seed: int = 3) -> list[np.ndarray]:
    return build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10, seed=seed).get_weights()


def _ce(w, x, y):
    """Per-example cross-entropy of the digits MLP (Flatten, Dense 64 relu, Dense softmax)."""
    w1, b1, w2, b2 = w
    h = ops.relu(ops.matmul(ops.reshape(x, (x.shape[0], -1)), w1) + b1)
    p = ops.softmax(ops.matmul(h, w2) + b2, axis=-1)
    picked = ops.take_along_axis(p, ops.reshape(ops.cast(y, "int32"), (-1, 1)), axis=1)
    return -ops.log(ops.clip(picked[:, 0], 1e-7, 1.0))


def _value_and_grad(fn, w):
    """(fn(w), ∇fn(w)) eagerly: a GradientTape on TF, jax.value_and_grad on JAX."""
    w = [ops.convert_to_tensor(a) for a in w]
    if keras.backend.backend() == "jax":
        import jax

        value, grads = jax.value_and_grad(fn)(w)
    else:
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(w)
            value = fn(w)
        grads = tape.gradient(value, w)
    return float(value), [np.asarray(g, np.float64) for g in grads]


def _reference_batches(n, batch, epochs, seed, drop_remainder=False):
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        order = rng.permutation(n)
        stop = n - n % batch if drop_remainder else n
        for start in range(0, stop, batch):
            yield epoch, order[start : start + batch]


def _reference_sgd(w0, x, y, *, epochs, batch, seed, mu=0.0):
    """Eager minibatch SGD on mean CE + (mu/2)||w - w0||^2; last-epoch mean loss."""
    w = [np.array(a, np.float32) for a in w0]
    last = {}
    for epoch, idx in _reference_batches(len(x), min(batch, len(x)), epochs, seed):
        data_loss = float(ops.mean(_ce(w, x[idx], y[idx])))

        def loss(v, idx=idx):
            prox = sum(ops.sum((a - b) ** 2) for a, b in zip(v, w0))
            return ops.mean(_ce(v, x[idx], y[idx])) + 0.5 * mu * prox

        _, grads = _value_and_grad(loss, w)
        w = [(a - LR * g).astype(np.float32) for a, g in zip(w, grads)]
        last.setdefault(epoch, []).append((data_loss, len(idx)))
    final = last[epochs - 1]
    mean = sum(loss * k for loss, k in final) / sum(k for _, k in final)
    return w, mean


def _reference_dpsgd(w0, x, y, schedule, *, clip, denominator):
    """Eager DP-SGD with z = 0: per-example gradients, each clipped to C, summed, over D."""
    w = [np.array(a, np.float32) for a in w0]
    clipped_any = False
    for idx, mask in zip(schedule.idx, schedule.mask):
        total = [np.zeros(a.shape, np.float64) for a in w0]
        for i in idx[mask > 0]:
            _, grads = _value_and_grad(
                lambda v, i=i: ops.sum(_ce(v, x[i : i + 1], y[i : i + 1])), w
            )
            norm = math.sqrt(sum(float(np.sum(g**2)) for g in grads))
            clipped_any |= norm > clip
            total = [t + g * min(1.0, clip / norm) for t, g in zip(total, grads)]
        w = [(a - LR * t / denominator).astype(np.float32) for a, t in zip(w, total)]
    return w, clipped_any


def _assert_close(a, b, atol=2e-5):
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=atol)


def test_batch_schedule_is_seeded_permutations_with_padded_last_batch():
    sched = batch_schedule(13, 5, 2, seed=7)
    assert sched.idx.shape == (6, 5) and sched.steps_per_epoch == 3
    rng = np.random.default_rng(7)
    for epoch in range(2):
        order = rng.permutation(13)
        rows = sched.idx[3 * epoch : 3 * epoch + 3][sched.mask[3 * epoch : 3 * epoch + 3] > 0]
        np.testing.assert_array_equal(rows, order)
    assert sched.mask.sum() == 26 and sched.mask[2].sum() == 3
    dropped = batch_schedule(13, 5, 2, seed=7, drop_remainder=True)
    assert dropped.idx.shape == (4, 5) and dropped.mask.min() == 1.0
    assert batch_schedule(3, 8, 1, seed=0).idx.shape == (1, 3)  # width min(B, n)


@pytest.mark.parametrize("mu", [0.0, 0.5], ids=["standard", "fedprox"])
def test_compiled_training_matches_eager_reference(mu):
    model, w0 = _model(), _weights()
    for n, seed in [(13, 1), (21, 2)]:  # short last batch; two client sizes, one trace
        x, y = _data(n, seed)
        settings = TrainSettings(
            epochs=3, batch_size=5, learning_rate=LR, optimizer="sgd", proximal_mu=mu, seed=seed
        )
        got, metrics = train_local(model, w0, x, y, settings)
        want, want_loss = _reference_sgd(w0, x, y, epochs=3, batch=5, seed=seed, mu=mu)
        _assert_close(got, want)
        assert metrics["train-loss"] == pytest.approx(want_loss, rel=1e-4)
        assert any(not np.allclose(a, b) for a, b in zip(got, w0))  # it trained
        assert all(w.dtype == np.float32 and w.shape == v.shape for w, v in zip(got, w0))
    assert trainer_for(model).traces == 1  # no retracing across calls and client sizes


def test_fedprox_reference_differs_from_standard():
    """The FedProx comparison above is not vacuous: mu changes the result."""
    x, y = _data(13, 1)
    plain, _ = _reference_sgd(_weights(), x, y, epochs=3, batch=5, seed=1)
    prox, _ = _reference_sgd(_weights(), x, y, epochs=3, batch=5, seed=1, mu=0.5)
    assert max(float(np.abs(a - b).max()) for a, b in zip(plain, prox)) > 1e-4


def _dp_trainer(clip: float, z: float) -> CompiledTrainer:
    model = _model()
    loss = keras.losses.SparseCategoricalCrossentropy(reduction=None)
    dp = DpStepConfig(l2_norm_clip=clip, noise_multiplier=z)
    return CompiledTrainer(model, keras.optimizers.SGD(LR), loss, classifier=True, dp=dp)


@dataclass(frozen=True)
class _WithDenominator(Schedule):
    denominator: float = 0.0


def _poisson_like_schedule(n: int, width: int, steps: int, seed: int) -> Schedule:
    """Variable-size batches padded to ``width`` (mask 0), one of them empty."""
    rng = np.random.default_rng(seed)
    idx = np.zeros((steps, width), np.int32)
    mask = np.zeros((steps, width), np.float32)
    for s in range(steps):
        size = 0 if s == 1 else int(rng.integers(1, width + 1))
        idx[s, :size] = rng.choice(n, size, replace=False)
        idx[s, size:] = rng.integers(0, n, width - size)  # padding rows point anywhere
        mask[s, :size] = 1.0
    return Schedule(idx=idx, mask=mask, steps_per_epoch=steps)


def test_compiled_dpsgd_matches_eager_per_example_clipping_reference():
    clip = 0.2
    trainer, w0 = _dp_trainer(clip, 0.0), _weights()
    x, y = _data(14, 4)
    seed = np.array([5, 6], np.int32)
    got, metrics = trainer.train(w0, x, y, epochs=2, batch_size=4, seed=9, noise_seed=seed)
    plain = batch_schedule(14, 4, 2, seed=9, drop_remainder=True)
    assert plain.idx.shape == (6, 4)
    want, clipped = _reference_dpsgd(w0, x, y, plain, clip=clip, denominator=4)
    assert clipped  # clipping was active in the reference
    assert np.isfinite(metrics["train-loss"]) and "train-accuracy" not in metrics
    _assert_close(got, want)
    # a caller's schedule: padded variable-size batches, an empty one, a fixed denominator
    sched = _poisson_like_schedule(14, 8, 5, seed=1)
    got, _ = trainer.train(
        w0, x, y, epochs=1, batch_size=4, seed=9, schedule=sched, noise_seed=seed
    )
    want, _ = _reference_dpsgd(w0, x, y, sched, clip=clip, denominator=8)
    _assert_close(got, want)
    sched = _WithDenominator(sched.idx, sched.mask, 5, denominator=3.5)  # Poisson: D = q·n
    got, _ = trainer.train(
        w0, x, y, epochs=1, batch_size=4, seed=9, schedule=sched, noise_seed=seed
    )
    want, _ = _reference_dpsgd(w0, x, y, sched, clip=clip, denominator=3.5)
    _assert_close(got, want)


def test_compiled_dpsgd_noise_has_std_z_clip_over_denominator():
    """One full-batch step: (w_noisy − w_clean)·D/lr ~ N(0, (zC)²) per coordinate."""
    clip, z, n = 0.2, 1.5, 8
    x, y = _data(n, 5)
    w0 = _weights()
    results = []
    for noise in (0.0, z):
        trainer = _dp_trainer(clip, noise)
        seed = np.array([3, 4], np.int32)
        kwargs = dict(epochs=1, batch_size=n, seed=2, noise_seed=seed)
        results.append(trainer.train(w0, x, y, **kwargs)[0])
        if noise:
            again = trainer.train(w0, x, y, **kwargs)[0]
            assert all(np.array_equal(a, b) for a, b in zip(results[-1], again))  # seeded
            other = trainer.train(w0, x, y, **{**kwargs, "noise_seed": seed + 1})[0]
            assert not np.array_equal(other[0], again[0])
    diff = np.concatenate([(b - a).ravel() for a, b in zip(*results)]) * n / LR
    assert diff.size > 4000
    assert abs(diff.std() / (z * clip) - 1) < 0.05
    assert abs(diff.mean()) < 4 * z * clip / math.sqrt(diff.size)


def test_dp_trainer_refuses_a_missing_noise_seed():
    x, y = _data(8, 5)
    with pytest.raises(ValueError, match="noise_seed = None"):
        _dp_trainer(0.2, 1.0).train(_weights(), x, y, epochs=1, batch_size=4, seed=0)
    with pytest.raises(ValueError, match="l2_norm_clip = 0"):
        DpStepConfig(l2_norm_clip=0, noise_multiplier=1.0)


def test_compiled_evaluation_matches_keras():
    model, w0 = _model(), _weights()
    x, y = _data(50, 6)
    got = evaluate_local(model, w0, x, y)
    ref = build_model("digits-mlp", input_shape=(8, 8, 1), num_classes=10)
    ref.set_weights(w0)
    want = ref.evaluate(x, y, verbose=0, return_dict=True)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert got["accuracy"] == pytest.approx(want["accuracy"])
    np.testing.assert_allclose(predict_proba(model, w0, x), ref.predict(x, verbose=0), atol=1e-6)
    want_ce = float(np.mean(_ce(w0, x, y)))
    assert got["loss"] == pytest.approx(want_ce, rel=1e-5)


def test_xla_and_mixed_precision_options_on_cpu():
    """The GPU-path switches run here too: XLA gives the same weights, float16 still learns."""
    from fedpriv.clients.compiled import build_policy_model

    x, y = _data(21, 7)
    w0 = _weights()
    results = []
    for jit in (False, True):
        trainer = CompiledTrainer(
            _model(),
            keras.optimizers.SGD(LR),
            keras.losses.SparseCategoricalCrossentropy(reduction=None),
            classifier=True,
            jit_compile=jit,
        )
        results.append(trainer.train(w0, x, y, epochs=2, batch_size=5, seed=3)[0])
    _assert_close(results[0], results[1], atol=1e-5)
    mixed = build_policy_model(_model, mixed_precision=True)
    assert mixed.compute_dtype == "float16" and mixed.weights[0].dtype == "float32"
    trainer = CompiledTrainer(
        mixed,
        keras.optimizers.SGD(0.2),
        keras.losses.SparseCategoricalCrossentropy(reduction=None),
        classifier=True,
    )
    assert trainer.loss_scale
    before = trainer.evaluate(w0, x, y)["loss"]
    trained, _ = trainer.train(w0, x, y, epochs=20, batch_size=7, seed=3)
    assert all(np.all(np.isfinite(w)) and w.dtype == np.float32 for w in trained)
    assert trainer.evaluate(trained, x, y)["loss"] < 0.7 * before
    assert keras.mixed_precision.global_policy().name == "float32"  # policy restored


def test_cached_client_data_and_optimizer_state_leave_every_call_unchanged():
    """A trainer converts each client's split to backend tensors once (kept for
    the last DATA_CACHE pairs) and Adam's fresh state once. Calls that hit those caches give
    the weights of the SGD reference (clients A, B, A again, an equal copy of A, then A after
    the cache has evicted it), and Adam's state still starts fresh at every call (the same
    call twice gives the same weights; a stale (m, v, t) would not)."""
    from fedpriv.clients.compiled import DATA_CACHE

    model, w0 = _model(), _weights()
    trainer = trainer_for(model)
    settings = TrainSettings(epochs=2, batch_size=5, learning_rate=LR, optimizer="sgd", seed=4)
    a, b = _data(13, 1), _data(9, 2)
    others = [_data(6, 10 + k) for k in range(DATA_CACHE)]
    for x, y in [a, b, a, (a[0].copy(), a[1].copy()), *others, a]:
        got, _ = train_local(model, w0, x, y, settings)
        want, _ = _reference_sgd(w0, x, y, epochs=2, batch=5, seed=4)
        _assert_close(got, want)
        assert len(trainer._data) <= DATA_CACHE
    adam = build_model(
        "digits-mlp", input_shape=(8, 8, 1), num_classes=10, optimizer="adam", learning_rate=LR
    )
    first, _ = train_local(adam, w0, *a, settings)
    again, _ = train_local(adam, w0, *a, settings)
    _assert_close(first, again, atol=0)
    assert any(not np.allclose(p, q) for p, q in zip(first, w0))
