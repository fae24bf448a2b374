"""Run-config keys of DP-FTRL (``privacy = dp-ftrl``; Kairouz et al. 2021).

The mode also reads the shared keys ``noise-multiplier`` (z: node noise std / C),
``clipping-norm``, ``dp-delta``, ``server-learning-rate`` (η of the FTRL step) and
``server-momentum`` (μ, heavy-ball momentum on the noisy prefix-sum differences).
"""

from fedpriv.scenarios.config.schema import integer, key

KEYS = (
    key(
        "ftrl-restart-rounds",
        0,
        integer(0),
        "an integer >= 0 (0 = num-clients // clients-per-round)",
        "dp-ftrl: restart the noise tree every this many rounds; a client is asked at most "
        "once per tree",
    ),
)
