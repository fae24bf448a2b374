"""Privacy accounting, by topic (no TensorFlow, Ray or matplotlib is imported here, and
dp_accounting only when a name built on it is first used).

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

import importlib
from typing import Any

from fedpriv.privacy.accounting._checks import SAMPLING_MODES
from fedpriv.privacy.accounting.hdp import (
    HDP_CONFIGS,
    PLACEMENTS,
    amplified_epsilon,
    hdp_config_epsilon,
)
from fedpriv.privacy.accounting.leakage import LEAKAGE_LABEL, LeakageLedger, laplace_leakage

# Names of the submodules built on dp_accounting (about a second to import on a busy CPU),
# imported on first use: a client that only needs the leakage ledger (IFCA) does not load it.
_LAZY = {
    "EpsilonReport": "accountant",
    "PrivacyAccountant": "accountant",
    "ACCOUNTANT_LABEL": "events",
    "NeighborRel": "events",
    "client_round_event": "events",
    "effective_noise_multiplier": "events",
    "labels_for": "events",
    "relation_for": "events",
    "dp_epsilon": "gaussian",
    "epsilon_for_noise_multipliers": "gaussian",
    "epsilon_per_round_series": "gaussian",
    "round_rdp": "gaussian",
    "series_rounds": "gaussian",
    "server_accountant": "gaussian",
    "epsilon_from_rdp": "rdp",
}
# Names of the previous single-module API.
_ALIASES = {"gaussian_round_event": "client_round_event", "neighboring_relation": "relation_for"}


def __getattr__(name: str) -> Any:
    """The names of :data:`_LAZY` (and :data:`_ALIASES`), imported from their submodule on
    first use (PEP 562)."""
    target = _ALIASES.get(name, name)
    if target not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[target]}"), target)
    globals()[name] = value
    return value


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
