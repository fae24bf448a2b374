"""Where a simulation's nodes keep their ledgers, and what a run on a persistent federation says.

A simulation is one researcher's experiment: by default a fresh federation per run, its nodes'
ledgers under ``<output-dir>/node-state`` (the same experiment run again reports the same ε, a
resume finds its ledgers). ``federation-dir`` makes a persistent simulated federation for
lifetime studies: a run that starts on a non-empty ledger says so in its first lines, and
summary.json's ``federation`` block says what its figures include.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpriv.privacy.ledger.store import count_releases
from fedpriv.privacy.releases import STATE_ROOT_ENV

__all__ = [
    "NODE_STATE_FOLDER",
    "earlier_releases",
    "federation_block",
    "federation_line",
    "simulation_state_root",
]

PREFIX = "fedpriv:"
NODE_STATE_FOLDER = "node-state"  # <output-dir>/node-state: the simulated nodes' ledgers


def simulation_state_root(cfg: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """Where the simulated nodes keep their ledgers (``$FEDPRIV_STATE_ROOT`` of the
    simulation's processes): the run's ``federation-dir`` (a persistent simulated federation,
    for lifetime studies), else the researcher's own ``FEDPRIV_STATE_ROOT`` when set, else the
    run's output folder, ``<output-dir>/node-state``: a fresh federation per experiment (the
    same experiment run again reports the same ε; a resume finds its ledgers)."""
    if cfg.get("federation-dir"):
        return str(Path(str(cfg["federation-dir"])).expanduser().resolve())
    return env.get(STATE_ROOT_ENV) or str(Path(cfg["output-dir"]) / NODE_STATE_FOLDER)


def federation_line(cfg: Mapping[str, Any], earlier: int) -> str | None:
    """The first-lines notice of a run on a persistent federation that already released."""
    if not cfg.get("federation-dir"):
        return None
    if earlier == 0:
        return f"{PREFIX} federation-dir {cfg['federation-dir']}: a new federation (no release yet)"
    return (
        f"{PREFIX} federation-dir {cfg['federation-dir']} holds {earlier} earlier releases: "
        "the nodes' ε figures of this run are lifetime figures (they include those releases)"
    )


def federation_block(cfg: Mapping[str, Any], earlier: int) -> dict[str, Any]:
    """summary.json's ``federation``: where the nodes' ledgers are, and what they held."""
    root = simulation_state_root(cfg, os.environ)
    block: dict[str, Any] = {"state-root": root, "persistent": bool(cfg.get("federation-dir"))}
    block["earlier_releases"] = earlier
    block["this_run_releases"] = count_releases(root) - earlier
    block["figures"] = "lifetime (earlier releases included)" if earlier else "this run's"
    return block


def earlier_releases(cfg: Mapping[str, Any]) -> int:
    """The releases the run's state root holds before it starts."""
    return count_releases(simulation_state_root(cfg, os.environ))
