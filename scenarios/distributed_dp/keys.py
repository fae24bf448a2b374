"""Run-config keys of ``privacy = distributed-dp`` (Skellam noise shares under SecAgg).

The shared keys (``noise-multiplier``, ``clipping-norm``, ``dp-delta``) are declared in
:mod:`fedpriv.scenarios.dp.keys`; left at ``auto`` they take this mode's z = 1 (noise std
on the sum = z·B, B the integer sensitivity) and C = 1. Every key here is the client's
own (:data:`fedpriv.privacy.modes.distributed_dp.MODE` ``owned_keys``): a message that
changes one is refused. See docs/distributed-dp.md.
"""

from fedpriv.scenarios.config.schema import ConfigError, choice, integer, key, real

DROP_KEY = "distributed-drop-clients"
DROP_ALLOWED = "comma-separated partition ids (integers >= 0), or empty"


def drop_list(value: object) -> tuple[int, ...]:
    """The partitions of ``distributed-drop-clients`` (``"1,3"``); ConfigError otherwise."""
    text_value = str(value).strip()
    if not isinstance(value, str):
        raise ConfigError(DROP_KEY, value, DROP_ALLOWED)
    if not text_value:
        return ()
    parts = [p.strip() for p in text_value.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ConfigError(DROP_KEY, value, DROP_ALLOWED)
    return tuple(int(p) for p in parts)


def _drop_check(value: object) -> str:
    try:
        drop_list(value)
    except ConfigError:
        raise ValueError(DROP_ALLOWED) from None
    return str(value)


KEYS = (
    key(
        "distributed-target-epsilon",
        0.0,
        real(0),
        "a float >= 0 (0 = the noise from noise-multiplier)",
        "distributed DP: plan each client's Skellam share for this epsilon against the "
        "server over the run (0: use noise-multiplier)",
    ),
    key(
        "distributed-scale",
        1024.0,
        real(0, lo_open=True),
        "a float > 0",
        "distributed DP: gamma, the scale before rounding to integers (larger: less rounding "
        "error, more bits)",
    ),
    key(
        "distributed-bits",
        0,
        integer(0, 62),
        "an integer in [0, 62] (0 = auto)",
        "distributed DP: b, bits per coordinate of the ring Z_(2^b) (0: the fewest that "
        "hold the cohort's sum)",
    ),
    key(
        "distributed-threshold",
        0,
        integer(0),
        "an integer >= 0 (0 = auto: max(n/2 + 1, 2n/3))",
        "distributed DP: t, the fewest survivors that can unmask a round's sum (Shamir "
        "threshold; a majority of the cohort)",
    ),
    key(
        "distributed-colluders",
        0,
        integer(0),
        "an integer >= 0 (< the threshold)",
        "distributed DP: clients assumed to collude with the server (their noise is not "
        "counted: epsilon uses t - colluders noise shares)",
    ),
    key(
        "distributed-relation",
        "fixed",
        choice(("fixed", "poisson")),
        "fixed | poisson",
        "distributed DP: fixed = the server's cohort, replace-one, no amplification against "
        "the server; poisson = every client adds noise, includes its update on a secret coin",
    ),
    key(
        "distributed-inclusion-rate",
        1.0,
        real(0, 1, lo_open=True),
        "a float in (0, 1]",
        "distributed DP, poisson relation: q, the probability a client includes its update",
    ),
    key(
        "distributed-drop-clients",
        "",
        _drop_check,
        DROP_ALLOWED,
        "distributed DP fault injection: the server discards these clients' masked vectors "
        "(simulated dropouts after the share step; recovered from the shares)",
    ),
)
