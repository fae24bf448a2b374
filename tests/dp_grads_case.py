"""A small DP-SGD gradient case run on the current Keras backend (tests/test_dpsgd_grads.py).

Run as a script (``KERAS_BACKEND=jax python tests/dp_grads_case.py``) it prints the results
of :func:`run_case` as JSON, so the test process (TensorFlow) can compare the two backends.
The batch has padding rows (mask 0) and examples whose gradient norm is above and below C.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

D_IN, HIDDEN, CLASSES, WIDTH = 5, 4, 3, 8
CLIP = 1.5
Z = 1.3
DENOMINATOR = 6.0


def params(seed: int = 0) -> list[np.ndarray]:
    """W1 (5, 4), b1 (4,), W2 (4, 3), b2 (3,) in the model's weight order."""
    rng = np.random.default_rng(seed)
    return [
        rng.normal(0, 0.8, (D_IN, HIDDEN)).astype(np.float32),
        rng.normal(0, 0.3, (HIDDEN,)).astype(np.float32),
        rng.normal(0, 0.8, (HIDDEN, CLASSES)).astype(np.float32),
        rng.normal(0, 0.3, (CLASSES,)).astype(np.float32),
    ]


def batch(seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (8, 5), integer labels (8,), mask with the last 3 rows padding."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (WIDTH, D_IN)).astype(np.float32)
    x[1] *= 0.05  # a small-gradient example (not clipped)
    x[2] *= 4.0  # a large-gradient example (clipped)
    y = rng.integers(0, CLASSES, WIDTH).astype(np.int32)
    mask = np.array([1, 1, 1, 1, 1, 0, 0, 0], np.float32)
    return x, y, mask


def build_model() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((D_IN,)),
            keras.layers.Dense(HIDDEN, activation="tanh"),
            keras.layers.Dense(CLASSES, activation="softmax"),
        ]
    )
    model.set_weights(params())
    return model


def example_loss_for(model: keras.Model):
    """ℓ(w; x_i, y_i): cross-entropy of one example (batch dimension 1) via stateless_call."""
    loss = keras.losses.SparseCategoricalCrossentropy(reduction=None)
    non_trainable = [v.value for v in model.non_trainable_variables]

    def example_loss(trainable, x1, y1):
        pred, _ = model.stateless_call(trainable, non_trainable, x1, training=True)
        return keras.ops.sum(loss(y1, pred))

    return example_loss


def _compiled(fn):
    """``fn(trainable, x, y, mask, seed)`` compiled the backend's way (free batch dim on TF)."""
    if keras.backend.backend() == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    spec = [
        [tf.TensorSpec(p.shape, tf.float32) for p in params()],
        tf.TensorSpec((None, D_IN), tf.float32),
        tf.TensorSpec((None,), tf.int32),
        tf.TensorSpec((None,), tf.float32),
        tf.TensorSpec((2,), tf.int32),
    ]
    return tf.function(fn, input_signature=spec)


def run_case(noise_draws: int = 40) -> dict:
    """Clipped sums, losses, noise residuals and seed checks on this backend (as lists)."""
    from fedpriv.clients.dp_grads import private_grads, secret_seed

    model = build_model()
    example_loss = example_loss_for(model)
    trainable = [keras.ops.convert_to_tensor(p) for p in params()]
    x, y, mask = batch()

    def step(z):
        def fn(w, xb, yb, mb, seed):
            return private_grads(
                example_loss,
                w,
                xb,
                yb,
                mb,
                l2_norm_clip=CLIP,
                noise_multiplier=z,
                denominator=DENOMINATOR,
                noise_seed=seed,
            )

        return _compiled(fn)

    def flat(grads) -> np.ndarray:
        return np.concatenate([np.asarray(g, np.float64).ravel() for g in grads])

    quiet, noisy = step(0.0), step(Z)
    grads, losses = quiet(trainable, x, y, mask, np.array([0, 0], np.int32))
    clipped_sum = flat(grads) * DENOMINATOR
    residuals = []
    for s in range(noise_draws):
        g, _ = noisy(trainable, x, y, mask, np.array([7, s], np.int32))
        residuals.append(flat(g) * DENOMINATOR - clipped_sum)
    same_a, _ = noisy(trainable, x, y, mask, np.array([3, 4], np.int32))
    same_b, _ = noisy(trainable, x, y, mask, np.array([3, 4], np.int32))
    secret_a, _ = noisy(trainable, x, y, mask, secret_seed())
    secret_b, _ = noisy(trainable, x, y, mask, secret_seed())
    empty, _ = quiet(trainable, x, y, np.zeros_like(mask), np.array([0, 0], np.int32))
    return {
        "backend": keras.backend.backend(),
        "clipped_sum": clipped_sum.tolist(),
        "losses": np.asarray(losses, np.float64).tolist(),
        "residuals": np.asarray(residuals).tolist(),
        "opt_in_identical": bool(np.array_equal(flat(same_a), flat(same_b))),
        "secret_differ": bool(not np.array_equal(flat(secret_a), flat(secret_b))),
        "empty_batch_max": float(np.max(np.abs(flat(empty)))),
    }


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    json.dump(run_case(), sys.stdout)
