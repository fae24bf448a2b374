"""Run-config keys of the ``speed`` feature: image size and the GPU-path switches.

- ``image-size`` — side of the MP image datasets' images: 128 (MP's, the default), 64 or 32
  (block-averaged, :mod:`fedpriv.data.resize`; a labelled deviation from MP). Other datasets
  ignore it.
- ``jit-compile`` — on the TensorFlow backend, compile each local training step with XLA
  (``tf.function(jit_compile=True)``; the step has static shapes, :mod:`clients.compiled`).
  Off by default; moot on JAX, which always compiles the whole call with XLA.
- ``mixed-precision`` — build the model under Keras' ``mixed_float16`` policy (float16 compute,
  float32 variables) with dynamic loss scaling. Off by default; not with DP-SGD (its
  per-example clipping and noise are computed in float32).
- ``op-determinism`` — TensorFlow op determinism (``enable_op_determinism``), on by default so
  the same seed gives the same weights; turn it off on a GPU whose kernels have no
  deterministic implementation or to trade reproducibility for speed. No effect on JAX.
- ``evaluate-in-train`` — one message per round for train + evaluate
  (:mod:`scenarios.app.fused`): round t's train message also asks each client to evaluate the model
  it carries (the global model after round t-1) on its test split before training; one evaluate
  message follows the last round only. ``auto`` (the default): on where that is the same
  evaluation as today's (every client trains every round, standard run kind, not zonal),
  off elsewhere; ``true`` elsewhere is refused.
"""

from __future__ import annotations

from fedpriv.data.resize import IMAGE_SIZES
from scenarios.config.schema import boolean, key


def _auto_or_bool(value):
    if value != "auto" and not isinstance(value, bool):
        raise ValueError("not auto or a bool")
    return value


def _image_size(value):
    if isinstance(value, bool) or value not in IMAGE_SIZES:
        raise ValueError("not an allowed image size")
    return int(value)


KEYS = (
    key(
        "image-size",
        128,
        _image_size,
        " | ".join(str(s) for s in IMAGE_SIZES),
        "side of the MP image datasets' images (128 = MP; 64/32 are a labelled deviation)",
    ),
    key("jit-compile", False, boolean, "true | false", "XLA-compile each local training step"),
    key(
        "mixed-precision",
        False,
        boolean,
        "true | false",
        "mixed_float16 compute with float32 variables and loss scaling",
    ),
    key(
        "op-determinism",
        True,
        boolean,
        "true | false",
        "TensorFlow op determinism (same seed, same weights)",
    ),
    key(
        "evaluate-in-train",
        "auto",
        _auto_or_bool,
        "auto | true | false",
        "round t's train message also evaluates the model after round t-1 (one message per "
        "round; auto = on where every client trains every round)",
    ),
)
