"""The backend part of the compiled trainer: gradient, step loop and compilation.

Everything else in :mod:`fedpriv.clients.compiled` is ``keras.ops`` and ``model.stateless_call``;
only what Keras has no portable form for lives here, once per backend
(``keras.backend.backend()``, fixed when ``keras`` is imported):

- ``tensorflow``: the gradient is a ``tf.GradientTape`` that watches the trainable tensors;
  the loop is a ``tf.while_loop`` over a traced step count; a function is compiled with
  ``tf.function`` and an ``input_signature`` whose leading dimensions are free (``None``),
  so clients of every size and step count share ONE trace per input dtype/feature shape.
  ``jit_compile`` compiles the step with XLA (``tf.function(jit_compile=True)``).
- ``jax``: ``jax.value_and_grad``, ``jax.lax.fori_loop`` with a traced upper bound (a
  ``while_loop``: no wasted steps), ``jax.jit`` (always: ``jit_compile`` is moot). ``jax.jit``
  retraces per input shape, so the caller pads the shapes that vary by client to buckets
  (:func:`bucket`): the number of rows of the batch table and of the data to the next
  power of two (at least 32 rows of data, 8 steps). The padded steps are never run (the loop
  stops at the real count) and padded data rows are never indexed, so clients of sizes
  17..32 with up to 8 steps share one trace, and a federation sees O(log n) traces.

  On the CPU, XLA runs convolutions inside a loop body an order of magnitude slower than
  outside one (jax-ml/jax#12868; measured here: MP CNN step 0.6 s alone, 15 s inside
  ``fori_loop``), so there (:data:`HOST_LOOP`) the steps are a Python loop over ONE jitted
  step, with the state kept on the device; the per-step dispatch costs microseconds.
  ``FEDPRIV_STEP_LOOP`` = ``host`` | ``device`` overrides the choice (tests).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

BACKEND = keras.backend.backend()
if BACKEND not in ("tensorflow", "jax"):
    raise ImportError(f"KERAS_BACKEND = {BACKEND!r}: expected tensorflow | jax")

MIN_ROWS = {"data": 32, "steps": 8, "clients": 4}


def _host_loop() -> bool:
    choice = os.environ.get("FEDPRIV_STEP_LOOP", "auto")
    if choice not in ("auto", "host", "device"):
        raise ValueError(f"FEDPRIV_STEP_LOOP = {choice!r}: expected auto | host | device")
    if choice != "auto":
        return choice == "host" and BACKEND == "jax"
    if BACKEND != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


HOST_LOOP = _host_loop()


def bucket(n: int, kind: str) -> int:
    """The padded length of ``n`` rows: ``n`` on TF, the next power of two (>= a floor) on JAX."""
    if BACKEND == "tensorflow":
        return int(n)
    return max(MIN_ROWS[kind], 1 << max(0, int(n) - 1).bit_length())


def pad_rows(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` with zero rows appended up to ``rows`` (``a`` itself when already that long)."""
    if len(a) == rows:
        return a
    out = np.zeros((rows, *a.shape[1:]), dtype=a.dtype)
    out[: len(a)] = a
    return out


def stateless_optimizer(optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
    """A fresh, unbuilt copy of ``optimizer`` whose ``stateless_apply`` works on this backend.

    JAX: the optimizer itself. TF: Keras's TF optimizer refuses ``stateless_apply`` (its
    updates go through ``tf.distribute`` and assign into ``tf.Variable`` objects directly);
    the copy is of a subclass that takes the backend-agnostic ``BaseOptimizer`` methods
    instead (``stateless_apply``, ``assign*``, the update step: assignments recorded by
    Keras's ``StatelessScope``), so the update math is Keras's own. No tf.distribute.
    """
    if BACKEND == "jax":
        return optimizer
    from keras.src.backend.tensorflow.optimizer import TFOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    keep = {"__init__", "add_variable_from_reference", "_clip_by_norm", "variables"}
    overrides = {
        name: getattr(BaseOptimizer, name)
        for name, value in vars(TFOptimizer).items()
        if callable(value)
        and name not in keep
        and not name.startswith("__")
        and hasattr(BaseOptimizer, name)
    }
    cls = type(optimizer)
    stateless = type(f"Stateless{cls.__name__}", (cls,), overrides)
    return stateless.from_config(optimizer.get_config())


def value_and_grad(fn: Callable) -> Callable:
    """``fn(trainable, *args) -> (value, aux)`` as ``g(...) -> ((value, aux), grads)``."""
    if BACKEND == "jax":
        import jax

        return jax.value_and_grad(fn, has_aux=True)
    import tensorflow as tf

    def wrapped(trainable, *args):
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            value, aux = fn(trainable, *args)
        return (value, aux), tape.gradient(value, trainable)

    return wrapped


def fori_loop(upper: Any, body: Callable, init: Any) -> Any:
    """``carry = body(i, carry)`` for i in 0..upper-1 (``upper`` a traced int32 scalar)."""
    if BACKEND == "jax":
        import jax

        return jax.lax.fori_loop(0, upper, body, init)
    import tensorflow as tf

    _, out = tf.while_loop(
        lambda i, _c: i < upper,
        lambda i, c: (i + 1, body(i, c)),
        (tf.constant(0, tf.int32), init),
    )
    return out


def map_clients(fn: Callable, xs: Any, out_like: Any) -> Any:
    """``fn`` over the leading axis of every array in ``xs``, outputs stacked: a cohort's
    clients inside ONE compiled call. ``out_like``: a structure like ``fn``'s output whose
    arrays have the per-client shapes and dtypes (TF's map needs the output signature; JAX
    ignores it).

    TF: ``tf.map_fn``, up to 10 clients at a time (``parallel_iterations``; their states are
    independent). JAX: ``jax.vmap``, every client's step as one batched step (the loop runs
    to the longest client's step count, each client's carry frozen after its own last
    step). (On JAX's CPU host loop cohorts are not pooled.) Measured on an H200 (MP CNN, 4
    clients, ``bench/results-gpu.md``): ``jax.lax.map`` (the clients one after another inside
    the call) compiled as long and ran its rounds no faster than ``vmap``."""
    if BACKEND == "jax":
        import jax

        return jax.vmap(fn)(xs)
    import tensorflow as tf

    signature = tf.nest.map_structure(
        lambda a: tf.TensorSpec(tuple(a.shape), tf.as_dtype(a.dtype)), out_like
    )
    return tf.map_fn(fn, xs, fn_output_signature=signature)


def compile_step(step: Callable, jit_compile: bool) -> Callable:
    """The step as called inside the loop: XLA-compiled on TF when asked, else itself."""
    if BACKEND == "tensorflow" and jit_compile:
        import tensorflow as tf

        return tf.function(step, jit_compile=True)
    return step


def compile_fn(fn: Callable, args: Sequence[Any], free: Sequence[int]) -> Callable:
    """``fn`` compiled for arguments like ``args`` (arrays or lists of arrays).

    ``free[k]`` leading dimensions of argument k are left free on TF (``input_signature``
    with ``None``); JAX's ``jit`` specialises on every shape instead (see :func:`bucket`).
    """
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)
    import tensorflow as tf

    def spec(a, k):
        shape, dtype = tuple(a.shape), tf.as_dtype(a.dtype)
        return tf.TensorSpec((None,) * k + shape[k:], dtype)

    signature = [
        [spec(a, k) for a in arg] if isinstance(arg, (list, tuple)) else spec(arg, k)
        for arg, k in zip(args, free)
    ]
    return tf.function(fn, input_signature=signature)


def device_put(tree: Any) -> Any:
    """``tree`` on the default device once (JAX), so a host loop does not copy it per step."""
    if BACKEND != "jax":
        return tree
    import jax

    return jax.device_put(tree)


def to_device(tree: Any) -> Any:
    """``tree`` (arrays or lists of arrays) as backend tensors, converted once: a compiled
    function called with them converts nothing (on TF a numpy argument is copied into a new
    tensor at every call)."""
    if BACKEND == "jax":
        import jax

        return jax.device_put(tree)
    import tensorflow as tf

    if isinstance(tree, (list, tuple)):
        return type(tree)(to_device(a) for a in tree)
    return tf.convert_to_tensor(tree)


def to_numpy(value: Any) -> np.ndarray:
    """A backend tensor as a numpy array (TF's own ``.numpy()``: numpy 2 warns on
    ``np.array`` of a TF tensor, whose ``__array__`` takes no ``copy`` argument)."""
    if BACKEND == "tensorflow" and hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value)


def set_op_determinism(enabled: bool) -> None:
    """TF op determinism on/off (reproducible kernels); a no-op on JAX (deterministic on CPU)."""
    if BACKEND != "tensorflow":
        return
    import tensorflow as tf

    if enabled:
        tf.config.experimental.enable_op_determinism()
    else:
        tf.config.experimental.disable_op_determinism()
