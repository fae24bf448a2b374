"""Feature ``faults``: adversarial clients as a scenario feature.

Declares the keys ``malicious-clients``, ``attack``, ``attack-factor``
(:mod:`fedpriv.scenarios.faults.keys`) and their cross-key check. The attack itself is client-side
(:func:`fedpriv.clients.adversary.tamper_reply`, applied by the ClientApp to the reply of whatever
training task ran), so it works with every privacy mode of the standard run; what reaches
the global model is decided by the server chain (``ValidUpdatesOnly`` drops NaN/Inf/wrong
shapes, the DP wrappers clip). Resume, preflight and the deployment faults need no keys:
they live in :mod:`fedpriv.scenarios.cli.preflight`, :mod:`fedpriv.scenarios.app.resume` and the
federation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpriv.clients.adversary import parse_partitions
from fedpriv.scenarios.config.feature import Catalog, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.faults.keys import KEYS


def check_attack(cfg: Mapping[str, Any], catalog: Catalog) -> None:
    """``malicious-clients`` names partitions that exist; an attack needs an attacker."""
    del catalog
    try:
        parsed = parse_partitions(cfg["malicious-clients"], int(cfg["num-clients"]))
    except ValueError as err:
        raise ConfigError(
            "malicious-clients",
            cfg["malicious-clients"],
            f"comma-separated partition ids in [0, {int(cfg['num-clients']) - 1}] ({err})",
        ) from None
    if cfg["attack"] != "none" and not parsed:
        raise ConfigError(
            "malicious-clients", cfg["malicious-clients"], f"at least one partition id when "
            f"attack = {cfg['attack']!r}"
        )  # fmt: skip


FEATURE = Feature(
    name="faults",
    description="Adversarial clients (malicious-clients, attack); resume, preflight, faults.",
    keys=KEYS,
    checks=(check_attack,),
)
