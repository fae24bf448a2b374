"""Privacy accounting, by topic (no TensorFlow, Ray or matplotlib is imported here).

* :mod:`.events` — the ``DpEvent`` of a round of the server-side Gaussian mechanism and the
  labels (accountant, adjacency, sampling) every ε carries;
* :mod:`.pld` / :mod:`.rdp` — PLD (incl. the replace-one dominating pair of fixed-size
  sampling) and capped RDP of those events;
* :mod:`.accountant` — :class:`PrivacyAccountant`, the one accountant that composes the
  events of every mechanism (global DP, zonal levels, DP-SGD);
* :mod:`.gaussian` — ε of z over rounds (``dp_epsilon``) and its per-round series;
* :mod:`.planning` — the figures a run config implies (``fedpriv epsilon``);
* :mod:`.leakage` — GP's leakage ledger (a heuristic); :mod:`.hdp` — HDP's
  amplification-by-averaging ε (a heuristic).
"""

from fedpriv.privacy.accounting._checks import SAMPLING_MODES
from fedpriv.privacy.accounting.accountant import EpsilonReport, PrivacyAccountant
from fedpriv.privacy.accounting.events import (
    ACCOUNTANT_LABEL,
    NeighborRel,
    client_round_event,
    effective_noise_multiplier,
    labels_for,
    relation_for,
)
from fedpriv.privacy.accounting.gaussian import (
    dp_epsilon,
    epsilon_for_noise_multipliers,
    epsilon_per_round_series,
    round_rdp,
    series_rounds,
    server_accountant,
)
from fedpriv.privacy.accounting.hdp import (
    HDP_CONFIGS,
    PLACEMENTS,
    amplified_epsilon,
    hdp_config_epsilon,
)
from fedpriv.privacy.accounting.leakage import LEAKAGE_LABEL, LeakageLedger, laplace_leakage
from fedpriv.privacy.accounting.rdp import epsilon_from_rdp

# Names of the previous single-module API.
gaussian_round_event = client_round_event
neighboring_relation = relation_for

__all__ = [
    "SAMPLING_MODES",
    "ACCOUNTANT_LABEL",
    "EpsilonReport",
    "PrivacyAccountant",
    "NeighborRel",
    "client_round_event",
    "effective_noise_multiplier",
    "labels_for",
    "relation_for",
    "dp_epsilon",
    "epsilon_for_noise_multipliers",
    "epsilon_per_round_series",
    "round_rdp",
    "series_rounds",
    "server_accountant",
    "HDP_CONFIGS",
    "PLACEMENTS",
    "amplified_epsilon",
    "hdp_config_epsilon",
    "LEAKAGE_LABEL",
    "LeakageLedger",
    "laplace_leakage",
    "epsilon_from_rdp",
    "gaussian_round_event",
    "neighboring_relation",
]
