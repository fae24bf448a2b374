"""Run-config keys of the faults feature: adversarial clients.

``attack`` names what the clients listed in ``malicious-clients`` do to their training
reply (:mod:`fedpriv.clients.adversary`, which has the table); ``attack-factor`` is its strength
(the boost of ``scale``/``sign-flip``/``model-replacement``, the per-layer push of
``distance-gaming``). ``attack = 'none'`` (the default) or an empty list: every client is
honest. The partition ids are checked against ``num-clients`` in ``scenarios/faults/feature.py``.
"""

from __future__ import annotations

from fedpriv.clients.adversary import ATTACKS
from fedpriv.scenarios.config.schema import KeySpec, boolean, choice, real, text

KEYS = (
    KeySpec(
        "malicious-clients",
        "",
        text,
        "comma-separated partition ids in [0, num-clients) ('' = none)",
        "partition ids of the clients that attack (e.g. '0,3')",
    ),
    KeySpec(
        "attack",
        "none",
        choice(ATTACKS),
        "one of " + " | ".join(ATTACKS),
        "what a malicious client sends (clients/adversary.py)",
    ),
    KeySpec(
        "attack-factor",
        10.0,
        real(0, 1e12, lo_open=True),
        "a float in (0, 1e12]",
        "strength of the attack (boost factor, or distance pushed per layer)",
    ),
    KeySpec(
        "evaluate-sampled-only",
        False,
        boolean,
        "true | false",
        "distributed evaluation on the round's sampled clients only (cross-device scale)",
    ),
)
