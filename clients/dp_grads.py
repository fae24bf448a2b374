"""One DP-SGD gradient: per-example clipping, masked sum, Gaussian noise (Abadi et al. 2016, §3.1).

For a padded batch of width b with mask m_i (1 real example, 0 padding), per-example losses
ℓ_i(w) and clip norm C, noise multiplier z and a fixed denominator D:

    g̃ = ( Σ_i m_i · clip(∇_w ℓ_i(w), C)  +  N(0, (z·C)² I) ) / D,
    clip(g, C) = g · min(1, C / ‖g‖₂),

where ‖g‖₂ is the norm of the flat concatenation of the gradients of ALL trainable tensors
(one clip per example, no microbatches) and the noise is one draw of N(0, (zC)² I) over that
same flat vector. Under add/remove-one adjacency the masked clipped sum has L2 sensitivity C,
so the noised sum is the Gaussian mechanism with noise multiplier z; with Poisson-sampled
batches and D = the EXPECTED batch size (fixed, never the realised one) each step is the
Poisson-subsampled Gaussian mechanism that ``fedpriv.privacy.dpsgd`` accounts. A non-finite
per-example gradient counts as zero before clipping (jax-privacy's ``nan_safe``; the same on
TF), so it cannot break the sensitivity bound.

``example_loss(trainable_values, x_i, y_i)`` is a pure function of ONE example: ``x_i`` and
``y_i`` carry a leading batch dimension of 1 (so a Keras model's ``stateless_call`` and a
Keras loss apply unchanged); it returns a scalar (or a shape-(1,) tensor, which is summed).

Backends (``keras.backend.backend()``):

- ``jax``: ``jax_privacy.clipped_grad`` (vmap of ``jax.grad`` over the examples, per-example
  clipping, sum; padding via its ``is_padding_example``), jit-traceable;
- ``tensorflow``: ``tf.vectorized_map`` of a ``GradientTape`` over the examples (pfor), then
  the same clip and masked sum; traceable in ``tf.function`` with free leading dimensions.

Noise: stateless, from ``noise_seed`` (an integer tensor of shape (2,)): on JAX
``keras.random.normal`` with the seed as a raw key; on TF ``tf.random.stateless_normal``
(Keras 3's TF backend accepts only int or ``SeedGenerator`` seeds, not a traced tensor).
The seed must be secret from every other party (:func:`fedpriv.privacy.dpsgd.secret_seed`): anyone
who can rebuild it can subtract the noise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from fedpriv.privacy.dpsgd import secret_seed

__all__ = ["private_grads", "clipped_sum", "secret_seed"]

Tensor = Any
ExampleLoss = Callable[[Sequence[Tensor], Tensor, Tensor], Tensor]


def private_grads(
    example_loss: ExampleLoss,
    trainable: Sequence[Tensor],
    xb: Tensor,
    yb: Tensor,
    mb: Tensor,
    *,
    l2_norm_clip: float,
    noise_multiplier: float,
    denominator: float,
    noise_seed: Tensor,
) -> tuple[list[Tensor], Tensor]:
    """(Σ_i m_i·clip(∇ℓ_i, C) + N(0, (zC)² I)) / D and the per-example losses (module doc).

    ``mb`` is a 0/1 mask of width b. The per-example loss vector (shape (b,)) is the
    unclipped ℓ_i of every row, padding rows included: weight it by ``mb`` before use.
    With a Python ``noise_multiplier = 0`` no noise is drawn (the clipped sum / D is
    returned). C, z and D may be Python numbers or scalar tensors (traced, no retrace).
    """
    clip, z = _static(l2_norm_clip), _static(noise_multiplier)
    if clip is not None and not clip > 0:
        raise ValueError(f"l2_norm_clip = {l2_norm_clip!r}: expected a float > 0")
    if z is not None and not z >= 0:
        raise ValueError(f"noise_multiplier = {noise_multiplier!r}: expected a float >= 0")
    backend = keras.backend.backend()
    if backend == "jax":
        sums, losses = _clipped_sum_jax(example_loss, trainable, xb, yb, mb, l2_norm_clip)
    elif backend == "tensorflow":
        sums, losses = _clipped_sum_tf(example_loss, trainable, xb, yb, mb, l2_norm_clip)
    else:
        raise ValueError(f"keras backend = {backend!r}: expected jax | tensorflow")
    if z is None or z > 0:  # a traced z always draws (z = 0 then adds zeros)
        std = noise_multiplier * l2_norm_clip
        sums = [s + n for s, n in zip(sums, _noise(sums, std, noise_seed, backend))]
    return [s / denominator for s in sums], losses


def clipped_sum(
    example_loss: ExampleLoss,
    trainable: Sequence[Tensor],
    xb: Tensor,
    yb: Tensor,
    mb: Tensor,
    *,
    l2_norm_clip: float,
) -> tuple[list[Tensor], Tensor]:
    """Σ_i m_i · clip(∇ℓ_i, C) (no noise, no division) and the per-example losses."""
    return private_grads(
        example_loss,
        trainable,
        xb,
        yb,
        mb,
        l2_norm_clip=l2_norm_clip,
        noise_multiplier=0.0,
        denominator=1.0,
        noise_seed=None,
    )


def _static(value: Any) -> float | None:
    """``value`` as a float when it is a Python/numpy number, else None (a tensor)."""
    if isinstance(value, (int, float, np.number)):
        return float(value)
    return None


# --- JAX ---------------------------------------------------------------------------------


def _clipped_sum_jax(example_loss, trainable, xb, yb, mb, clip):
    import jax.numpy as jnp
    from jax_privacy import clipped_grad

    def loss(params, x1, y1):
        return jnp.sum(example_loss(params, x1, y1))

    grad_fn = clipped_grad(
        loss,
        argnums=0,
        l2_clip_norm=clip,
        batch_argnums=(1, 2),
        keep_batch_dim=True,  # example_loss sees x_i, y_i with a batch dimension of 1
        return_values=True,
    )
    grads, aux = grad_fn(list(trainable), xb, yb, is_padding_example=jnp.asarray(mb) <= 0)
    return list(grads), aux.values


# --- TensorFlow --------------------------------------------------------------------------


def _clipped_sum_tf(example_loss, trainable, xb, yb, mb, clip):
    import tensorflow as tf

    trainable = list(trainable)

    def one_example(args):
        x_i, y_i = args
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            value = tf.reduce_sum(example_loss(trainable, x_i[None], y_i[None]))
        grads = tape.gradient(value, trainable)
        grads = [
            tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
            for v, g in zip(trainable, grads)
        ]
        return value, grads

    losses, per_example = tf.vectorized_map(one_example, (xb, yb))
    per_example = [tf.where(tf.math.is_finite(g), g, tf.zeros_like(g)) for g in per_example]
    squares = [
        tf.reduce_sum(tf.reshape(tf.square(g), [tf.shape(g)[0], -1]), 1) for g in per_example
    ]
    norms = tf.sqrt(tf.add_n(squares))
    scale = tf.minimum(1.0, tf.cast(clip, norms.dtype) / norms)  # norm 0 -> C/0 = inf -> 1
    scale = scale * tf.cast(mb, scale.dtype)
    sums = [tf.tensordot(tf.cast(scale, g.dtype), g, axes=1) for g in per_example]
    return sums, losses


# --- noise -------------------------------------------------------------------------------


def _noise(like: list[Tensor], std: float, seed: Tensor, backend: str) -> list[Tensor]:
    """One N(0, std² I) draw over the flat concatenation of ``like``, split back to shapes."""
    if seed is None:
        raise ValueError("noise_seed = None: expected an integer tensor of shape (2,)")
    sizes = [int(np.prod(s.shape)) for s in like]
    total = int(sum(sizes))
    if backend == "jax":
        import jax.numpy as jnp

        key = jnp.asarray(seed).astype(jnp.uint32)
        flat = keras.random.normal((total,), dtype="float32", seed=key) * std
    else:
        import tensorflow as tf

        key = tf.cast(seed, tf.int32)
        flat = tf.random.stateless_normal((total,), seed=key, dtype=tf.float32)
        flat = flat * tf.cast(std, tf.float32)
    out, start = [], 0
    for s, size in zip(like, sizes):
        part = keras.ops.reshape(flat[start : start + size], s.shape)
        out.append(keras.ops.cast(part, s.dtype))
        start += size
    return out
