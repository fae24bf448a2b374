"""Run-config keys of adaptive clipping (``privacy = adaptive-clip``; Andrew et al. 2021).

The mode also reads the shared DP keys: ``noise-multiplier`` (z of the update and count
releases together), ``clipping-norm`` (the initial norm C_0), ``dp-delta``, ``dp-weighting``,
``client-sampling`` and ``max-epsilon``.
"""

from fedpriv.scenarios.config.schema import key, real

KEYS = (
    key(
        "target-quantile",
        0.5,
        real(0, 1),
        "a float in [0, 1]",
        "adaptive-clip: gamma, the fraction of updates the clipping norm should leave unclipped",
    ),
    key(
        "clip-learning-rate",
        0.2,
        real(0, lo_open=True),
        "a float > 0",
        "adaptive-clip: eta_C of the geometric step C <- C*exp(-eta_C*(b - gamma))",
    ),
    key(
        "clipped-count-stddev",
        0.0,
        real(0),
        "a float >= 0 (0 = m/20, or z when z >= m/10)",
        "adaptive-clip: sigma_b, noise std of the unclipped count; noise-multiplier must be "
        "< 2*sigma_b; auto: m/20 (Andrew et al.) when it admits z, else z",
    ),
)
