"""One DP-SGD gradient (Abadi et al. 2016 §3.1): per-example clip, masked sum, Gaussian noise.

    g̃ = ( Σ_i m_i · clip(∇_w ℓ_i(w), C) + N(0, (zC)² I) ) / D,  clip(g, C) = g · min(1, C/‖g‖₂)

with ‖g‖₂ the norm of the flat concatenation of all trainable tensors' gradients. A plain
reference implementation (``jax.vmap(jax.grad)`` on JAX, ``tf.map_fn`` of a tape on TF) of
the signature the compiled trainer calls; the DP-SGD module of the same name replaces it.

``example_loss(trainable, x_i, y_i)`` is a pure function of ONE example with a leading
batch dimension of 1; it returns a scalar or a shape-(1,) tensor (summed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras


def private_grads(
    example_loss: Callable,
    trainable: Sequence[Any],
    xb: Any,
    yb: Any,
    mb: Any,
    *,
    l2_norm_clip: float,
    noise_multiplier: float,
    denominator: Any,
    noise_seed: Any,
) -> tuple[list[Any], Any]:
    """(Σ_i m_i clip(∇ℓ_i, C) + N(0, (zC)² I)) / D and the per-example losses (module doc)."""
    if keras.backend.backend() == "jax":
        losses, grads = _per_example_jax(example_loss, list(trainable), xb, yb)
    else:
        losses, grads = _per_example_tf(example_loss, list(trainable), xb, yb)
    ops = keras.ops
    squares = [ops.sum(ops.reshape(ops.square(g), (ops.shape(g)[0], -1)), axis=1) for g in grads]
    norms = ops.sqrt(sum(squares))
    scale = ops.minimum(1.0, l2_norm_clip / ops.maximum(norms, 1e-12)) * mb
    sums = [ops.tensordot(scale, g, axes=1) for g in grads]
    if noise_multiplier > 0:
        std = noise_multiplier * l2_norm_clip
        sums = [s + n * std for s, n in zip(sums, _normal(sums, noise_seed))]
    return [s / denominator for s in sums], losses


def _per_example_jax(example_loss, trainable, xb, yb):
    import jax
    import jax.numpy as jnp

    def one(params, x_i, y_i):
        return jnp.sum(example_loss(params, x_i[None], y_i[None]))

    fn = jax.vmap(jax.value_and_grad(one), in_axes=(None, 0, 0))
    return fn(trainable, xb, yb)


def _per_example_tf(example_loss, trainable, xb, yb):
    import tensorflow as tf

    def one(args):
        x_i, y_i = args
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            value = tf.reduce_sum(example_loss(trainable, x_i[None], y_i[None]))
        return value, tape.gradient(value, trainable)

    signature = (
        tf.TensorSpec((), tf.float32),
        [tf.TensorSpec(v.shape, v.dtype) for v in trainable],
    )
    return tf.map_fn(one, (xb, yb), fn_output_signature=signature)


def _normal(like: list[Any], seed: Any) -> list[Any]:
    """Independent N(0, 1) tensors shaped like ``like`` from the (2,) int seed (stateless)."""
    if keras.backend.backend() == "jax":
        import jax

        key = jax.random.wrap_key_data(keras.ops.cast(seed, "uint32"))
        keys = jax.random.split(key, len(like))
        return [jax.random.normal(k, s.shape, s.dtype) for k, s in zip(keys, like)]
    import tensorflow as tf

    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int32), len(like))
    return [
        tf.random.stateless_normal(s.shape, seed=seeds[k], dtype=s.dtype)
        for k, s in enumerate(like)
    ]
