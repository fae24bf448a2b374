"""Run-config keys of client-side DP-SGD (``privacy = dp-sgd``; MP §4 untrusted server).

DP-SGD (Abadi et al. 2016) with Poisson-sampled batches (``fedpriv.dpsgd``): each example's
gradient is clipped to L2 norm ``l2-norm-clip`` (C), the clipped gradients of a batch are
summed, Gaussian noise N(0, (z·C)² I) with z = ``dp-sgd-noise-multiplier`` is added and the
sum is divided by the expected batch size min(``batch-size``, n).

- ``l2-norm-clip`` (C > 0, default 1.0): the common tutorial value.
- ``dp-sgd-noise-multiplier`` (z >= 0, default 1.1): the MNIST tutorial value of
  Abadi et al./tensorflow-privacy; with C = 1 it gives a single-digit example-level ε over
  a few epochs at δ = 1e-5. z = 0 clips without noise (ε = inf).
- ``microbatches`` (must be 0): kept so that an old config setting it gets a one-line
  error; DP-SGD clips each example on its own (checked in ``scenarios.dpsgd``).
- ``dp-sgd-delta`` (δ in (0, 1), default 1e-5): δ of the reported example-level ε.
"""

from __future__ import annotations

from scenarios.schema import KeySpec, integer, real

KEYS = (
    KeySpec(
        "l2-norm-clip",
        1.0,
        real(0, lo_open=True),
        "a float > 0",
        "DP-SGD per-example gradient clipping norm C",
    ),
    KeySpec(
        "dp-sgd-noise-multiplier",
        1.1,
        real(0),
        "a float >= 0",
        "DP-SGD noise multiplier z (noise std z*C on the summed gradient)",
    ),
    KeySpec(
        "microbatches",
        0,
        integer(0),
        "0 (one example per clip; the option was dropped)",
        "DP-SGD microbatches: must be 0 (each example clipped on its own)",
    ),
    KeySpec(
        "dp-sgd-delta",
        1e-5,
        real(0, 1, lo_open=True, hi_open=True),
        "a float in (0, 1)",
        "delta of the reported DP-SGD epsilon",
    ),
)
