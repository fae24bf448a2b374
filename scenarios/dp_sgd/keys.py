"""Run-config keys of client-side DP-SGD (``privacy = dp-sgd``; MP §4 untrusted server).

DP-SGD (Abadi et al. 2016) with Poisson-sampled batches (``fedpriv.privacy.dpsgd``): each example's
gradient is clipped to L2 norm ``clipping-norm`` (C), the clipped gradients of a batch are
summed, Gaussian noise N(0, (z·C)² I) with z = ``noise-multiplier`` is added and the sum is
divided by the expected batch size min(``batch-size``, n). The shared keys are declared in
:mod:`fedpriv.scenarios.dp.keys` (one key name per idea); left at ``auto`` they take DP-SGD's
values:

- ``clipping-norm`` C = 1.0: the common tutorial value.
- ``noise-multiplier`` z = 1.1: the MNIST tutorial value of Abadi et al./tensorflow-privacy;
  with C = 1 it gives a single-digit example-level ε over a few epochs at δ = 1e-5. z = 0
  clips without noise (ε = inf).
- ``dp-delta`` δ = 1e-5: δ of the reported example-level ε.

``microbatches`` (must be 0) is kept so that an old config setting it gets a one-line error;
DP-SGD clips each example on its own (checked in ``fedpriv.scenarios.dp_sgd.feature``). The old
names
``clipping-norm``, ``noise-multiplier`` and ``dp-delta`` are refused naming the new
ones (:data:`fedpriv.scenarios.config.schema.RENAMED`).
"""

from __future__ import annotations

from fedpriv.scenarios.config.schema import KeySpec, integer

KEYS = (
    KeySpec(
        "microbatches",
        0,
        integer(0),
        "0 (one example per clip; the option was dropped)",
        "DP-SGD microbatches: must be 0 (each example clipped on its own)",
    ),
)
