"""Run-config keys of empirical privacy auditing, declared in the audit feature.

``audit-canaries`` = 0 (default) runs no audit; ``fedpriv audit`` sets it (100 unless given).
See ``scenarios/audit/feature.py`` for what the canaries are and what the audit reports.
"""

from fedpriv.scenarios.config.schema import choice, integer, key, real

KEYS = (
    key(
        "audit-canaries",
        0,
        integer(0, 100_000),
        "an integer in [0, 100000] (0 = no audit)",
        "audit: number of canaries (client updates in random directions, or DP-SGD examples)",
    ),
    key(
        "audit-canary-norm",
        0.0,
        real(0),
        "a float >= 0 (0 = clipping-norm)",
        "audit: L2 norm of a canary client's update",
    ),
    key(
        "audit-canary-probability",
        0.5,
        real(0, 1, lo_open=True, hi_open=True),
        "a float in (0, 1) (0.5 for the one-run lower bound)",
        "audit: probability that a canary is inserted (the others are held out)",
    ),
    key(
        "audit-threat-model",
        "final",
        choice(("final", "every-round")),
        "final | every-round",
        "audit: the attacker sees the final model only, or every round's model",
    ),
    key(
        "audit-confidence",
        0.95,
        real(0, 1, lo_open=True, hi_open=True),
        "a float in (0, 1)",
        "audit: confidence of the epsilon lower bound",
    ),
)
