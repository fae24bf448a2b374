"""Run-config keys of DP-FTRL (``privacy = dp-ftrl``; Kairouz et al. 2021).

The mode also reads the shared keys ``noise-multiplier`` (z: node noise std / C),
``clipping-norm``, ``dp-delta``, ``server-learning-rate`` (η of the FTRL step) and
``clients-per-round`` (m: the block of each epoch's permutation asked per round). It does not
read ``server-momentum`` (FedAvgM's) nor ``num-sampled-clients`` (the step divides by the
updates aggregated).
"""

from fedpriv.scenarios.config.schema import choice, integer, key, real

KEYS = (
    key(
        "ftrl-restart-rounds",
        0,
        integer(0),
        "an integer >= 0 (0 = num-clients // clients-per-round)",
        "dp-ftrl: rounds of one epoch and one tree; each epoch asks clients-per-round clients "
        "a round from a fresh secret permutation, each client at most once, and restarts the "
        "tree (rounds × clients-per-round <= num-clients)",
    ),
    key(
        "ftrl-momentum",
        0.0,
        real(0, 1, hi_open=True),
        "a float in [0, 1)",
        "dp-ftrl: heavy-ball momentum on the noisy tree increments (0: the paper's FTRL; "
        "Kairouz et al. use 0.9 with a tuned server-learning-rate over long runs)",
    ),
    key(
        "ftrl-estimator",
        "honaker",
        choice(("tree", "honaker", "mf")),
        "tree | honaker | mf",
        "dp-ftrl: the prefix sum from Honaker's variance-reduced estimate of the tree's "
        "nodes, or from the dyadic nodes themselves (Algorithm 1; post-processing, the same "
        "epsilon), or mf: a matrix factorization optimised for the run's rounds and epochs "
        "instead of a tree per epoch (Choquette-Choo et al. 2023; at most 100 rounds; one "
        "Gaussian event of z for the run)",
    ),
)
