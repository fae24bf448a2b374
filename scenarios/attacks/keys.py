"""Run-config keys of the attacks feature (declared in the feature).

Client inference attack (MP §5, §7.4): client ``attacker-client`` knows a shadow set, a
stratified ``shadow-fraction`` of the training data of client ``target-client``, and attacks
the global model after round 1 of ``cia-local-epochs`` local epochs (MP: 20). With
``cia-absent-run`` the same rounds are run a second time with the target left out, so the
attack's scores can be compared with the counterfactual.

Cross-key checks (attacker != target, both < num-clients) apply to scenarios of kind ``cia``
only; they are in ``scenarios/attacks/feature.py`` (``check_cia_config``).
"""

from __future__ import annotations

from fedpriv.scenarios.config.schema import KeySpec, boolean, integer, real

KEYS = (
    KeySpec(
        "attacker-client",
        0,
        integer(0),
        "an integer >= 0 (a partition id, < num-clients, != target-client)",
        "CIA: partition id of the attacking client (MP: client 1 = partition 0)",
    ),
    KeySpec(
        "target-client",
        2,
        integer(0),
        "an integer >= 0 (a partition id, < num-clients, != attacker-client)",
        "CIA: partition id of the target client (MP: client 3 = partition 2)",
    ),
    KeySpec(
        "shadow-fraction",
        0.1,
        real(0, 1, lo_open=True),
        "a float in (0, 1]",
        "CIA: stratified fraction of the target's training data the attacker holds (MP: 0.1)",
    ),
    KeySpec(
        "cia-local-epochs",
        20,
        integer(1, 10_000),
        "an integer in [1, 10000]",
        "CIA: local epochs per round in the CIA scenario (MP §7.4: 20)",
    ),
    KeySpec(
        "cia-absent-run",
        True,
        boolean,
        "true | false",
        "CIA: also run the same rounds without the target (the counterfactual)",
    ),
)
