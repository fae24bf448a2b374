"""The image classifier DLG attacks and the soft-label loss it matches (GP Fig. 5).

The model is plain Keras 3 (``import keras``); the gradient matching that attacks it runs on
the TensorFlow backend (nested ``tf.GradientTape`` scopes, :mod:`.attack`), so every entry point
that differentiates checks :func:`tensorflow_backend` first: in a process on another backend
(``KERAS_BACKEND=jax``) it fails with one line naming KERAS_BACKEND instead of mixing
TensorFlow tensors into JAX variables.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

NDArrays = list[np.ndarray]
LABEL_MODES = ("optimize", "idlg")
PLACEMENTS = ("none", "ldp", "hdp", "cdp")


def tensorflow_backend() -> ModuleType:
    """``tensorflow``, once Keras is known to run on it; else a one-line ValueError.

    DLG differentiates a gradient (the gradient of ``‖∇_W L − g*‖²`` w.r.t. the dummy input)
    with nested ``tf.GradientTape`` scopes, which only see Keras variables on the TensorFlow
    backend.
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise ValueError(
            f"KERAS_BACKEND = {backend!r} is not allowed for DLG: it runs on the TensorFlow "
            "backend; start the process with KERAS_BACKEND=tensorflow"
        )
    import tensorflow as tf

    return tf


# --- the model DLG attacks --------------------------------------------------------------------


def build_dlg_cnn(
    *, input_shape: tuple[int, ...] = (8, 8, 1), num_classes: int = 10, seed: int = 0
) -> keras.Model:
    """A small twice-differentiable CNN of the kind DLG attacks (sigmoid activations).

    Conv2D(12, 3×3, same, sigmoid) → Conv2D(12, 3×3, same, sigmoid) → Flatten → Dense(K)
    (logits). Weights and biases ~ U(−0.5, 0.5), the initialisation of the DLG reference code
    (larger weights give the attacker more informative gradients). For 8×8×1 digits this is
    9 118 parameters.
    """
    if len(input_shape) != 3:
        raise ValueError(
            f"input_shape = {input_shape!r} is not allowed; expected (height, width, channels)"
        )
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes = {num_classes!r} is not allowed; expected an int >= 2")
    keras.utils.set_random_seed(int(seed))
    init = keras.initializers.RandomUniform(-0.5, 0.5, seed=int(seed))
    layers = keras.layers
    common = dict(kernel_initializer=init, bias_initializer=init)
    return keras.Sequential(
        [
            layers.Input(shape=tuple(input_shape)),
            layers.Conv2D(12, 3, padding="same", activation="sigmoid", **common),
            layers.Conv2D(12, 3, padding="same", activation="sigmoid", **common),
            layers.Flatten(),
            layers.Dense(num_classes, **common),
        ],
        name="dlg_cnn",
    )


def check_image_model(model: Any) -> tuple[tuple[int, int, int], int]:
    """``(input_shape, num_classes)`` of an image classifier, or a one-line ValueError.

    DLG reconstructs an image: the model must take (H, W, C) inputs and output class scores.
    """
    if not isinstance(model, keras.Model):
        raise ValueError(f"model = {model!r} is not allowed; expected a Keras image model")
    shape = tuple(model.input_shape)
    out = tuple(model.output_shape)
    if len(shape) != 4 or any(s is None for s in shape[1:]):
        raise ValueError(
            f"model {model.name!r} has input shape {shape[1:]}; DLG needs an image model with "
            "inputs (height, width, channels)"
        )
    if len(out) != 2 or out[1] is None or out[1] < 2:
        raise ValueError(
            f"model {model.name!r} has output shape {out[1:]}; DLG needs a classifier with "
            ">= 2 class outputs"
        )
    return (int(shape[1]), int(shape[2]), int(shape[3])), int(out[1])


def _outputs_are_probabilities(model: keras.Model) -> bool:
    last = model.layers[-1]
    return getattr(last, "activation", None) is keras.activations.softmax


def _soft_ce(model: keras.Model, x: Any, y_soft: Any) -> Any:
    """Mean cross-entropy of soft targets, ``mean_i −Σ_j y_ij log p_ij``; logit or softmax
    outputs (probabilities clipped to [1e-7, 1], Keras' epsilon)."""
    ops = keras.ops
    out = model(x, training=False)
    if _outputs_are_probabilities(model):
        logp = ops.log(ops.clip(out, 1e-7, 1.0))
    else:
        logp = ops.log_softmax(out, axis=-1)
    return ops.mean(-ops.sum(y_soft * logp, axis=-1))
