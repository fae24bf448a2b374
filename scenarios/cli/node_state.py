"""Where a simulation's nodes keep their ledgers, and what a run on a persistent federation says.

A simulation is one researcher's experiment: by default a fresh federation per run, its nodes'
ledgers under ``<output-dir>/node-state`` (the same experiment run again reports the same ε, a
resume finds its ledgers). ``federation-dir`` makes a persistent simulated federation for
lifetime studies: a run that starts on a non-empty ledger says so in its first lines, and
summary.json's ``federation`` block says what its figures include and, per party, this run's
ε beside the lifetime ε (``parties``). The server's ledger (a ``global-dp``,
``adaptive-clip``, ``dp-ftrl`` or ``client-budgets`` run, :mod:`fedpriv.privacy.ledger.server`)
lives in
``<federation-dir>/server``, else the run's ``server-state-dir``, else the run's own
``<output-dir>/server-state``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.privacy.ledger.folder import StateFolderError, checked_folder
from fedpriv.privacy.ledger.lifetime import ledger_marks, party_figures
from fedpriv.privacy.ledger.server import (
    PER_RUN,
    SERVER_STATE_ENV,
    SERVER_STATE_KEY,
    server_folder_refusal,
    server_state_dir,
)
from fedpriv.privacy.ledger.store import count_releases
from fedpriv.privacy.modes import mode_of
from fedpriv.privacy.releases import STATE_ROOT_ENV

__all__ = [
    "NODE_STATE_FOLDER",
    "SERVER_FOLDER",
    "Earlier",
    "check_server_folder",
    "earlier_releases",
    "federation_block",
    "federation_line",
    "lifetime_lines",
    "simulation_server_state",
    "simulation_state_root",
]

PREFIX = "fedpriv:"
NODE_STATE_FOLDER = "node-state"  # <output-dir>/node-state: the simulated nodes' ledgers
SERVER_FOLDER = "server"  # <federation-dir>/server: the server's ledger of a persistent one
SUMMARY_KEY = "server_ledger"  # summary.json: the server's figures (the ServerApp writes them)


def simulation_state_root(cfg: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """Where the simulated nodes keep their ledgers (``$FEDPRIV_STATE_ROOT`` of the
    simulation's processes): the run's ``federation-dir`` (a persistent simulated federation,
    for lifetime studies), else the researcher's own ``FEDPRIV_STATE_ROOT`` when set, else the
    run's output folder, ``<output-dir>/node-state``: a fresh federation per experiment (the
    same experiment run again reports the same ε; a resume finds its ledgers)."""
    if cfg.get("federation-dir"):
        return str(Path(str(cfg["federation-dir"])).expanduser().resolve())
    return env.get(STATE_ROOT_ENV) or str(Path(cfg["output-dir"]) / NODE_STATE_FOLDER)


def simulation_server_state(cfg: Mapping[str, Any], env: Mapping[str, str]) -> str:
    """``$FEDPRIV_SERVER_STATE_DIR`` of the simulation: ``<federation-dir>/server`` (a
    persistent federation), else the researcher's own value, else ``per-run`` (each run's
    ``<output-dir>/server-state``, a grid's cells each their own). The run config's
    ``server-state-dir`` overrides it (:func:`fedpriv.privacy.ledger.server.server_state_dir`)."""
    if cfg.get("federation-dir"):
        return str(Path(simulation_state_root(cfg, env)) / SERVER_FOLDER)
    return env.get(SERVER_STATE_ENV) or PER_RUN


def server_folder(cfg: Mapping[str, Any]) -> Path | None:
    """The server's state folder of this simulation's run (None: its mode has no server ε)."""
    if not mode_of(cfg).budgeted:
        return None
    env = {SERVER_STATE_ENV: simulation_server_state(cfg, os.environ)}
    return server_state_dir(str(cfg.get(SERVER_STATE_KEY, "") or ""), cfg["output-dir"], env)


def check_server_folder(cfg: Mapping[str, Any]) -> str | None:
    """The one line refusing the server's state folder (another user's, a link, ...), or
    None (the folder is created 0700 when absent)."""
    folder = server_folder(cfg)
    if folder is None or not (cfg.get(SERVER_STATE_KEY) or cfg.get("federation-dir")):
        return None  # the run's own <output-dir>/server-state: the ServerApp makes it
    try:
        checked_folder(folder)
    except StateFolderError as err:
        return f"{PREFIX} {server_folder_refusal(err)}"
    return None


@dataclass(frozen=True)
class Earlier:
    """What the federation's ledgers held before the run: the nodes' releases, the
    server's, and each node database's last row (to split this run's rows from earlier
    ones, only for a persistent federation)."""

    nodes: int
    server: int
    marks: dict[str, int] | None


def earlier_releases(cfg: Mapping[str, Any]) -> Earlier:
    """The releases the run's state root and server folder hold before it starts."""
    root = simulation_state_root(cfg, os.environ)
    folder = server_folder(cfg)
    server = count_releases(folder) if folder is not None else 0
    marks = ledger_marks(root) if cfg.get("federation-dir") else None
    return Earlier(count_releases(root), server, marks)


def federation_line(cfg: Mapping[str, Any], earlier: Earlier) -> str | None:
    """The first-lines notice of a run on a persistent federation (or a server ledger)
    that already released."""
    if not cfg.get("federation-dir"):
        if earlier.server == 0 or not cfg.get(SERVER_STATE_KEY):  # a resume's own rows
            return None
        return (
            f"{PREFIX} server-state-dir {server_folder(cfg)} holds {earlier.server} earlier "
            "server releases: the server's lifetime epsilon includes them"
        )
    where = f"{PREFIX} federation-dir {cfg['federation-dir']}"
    if earlier.nodes == 0 and earlier.server == 0:
        return f"{where}: a new federation (no release yet)"
    nodes = (
        "the nodes' epsilon figures of this run are lifetime figures (they include those "
        "releases); "
        if earlier.nodes
        else ""
    )
    return (
        f"{where} holds {earlier.nodes} earlier releases (and {earlier.server} of the "
        f"server): {nodes}the summary gives this run's epsilon beside the lifetime one"
    )


def federation_block(
    cfg: Mapping[str, Any], earlier: Earlier, server: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """summary.json's ``federation``: where the ledgers are, what they held, and per party
    (the server: ``server``; a node: ``<folder>/<party>/<identity>``) this run's ε beside
    the lifetime ε and the earlier releases (a persistent federation, or a server ledger
    that held earlier releases)."""
    root = simulation_state_root(cfg, os.environ)
    persistent = bool(cfg.get("federation-dir"))
    block: dict[str, Any] = {"state-root": root, "persistent": persistent}
    block["earlier_releases"] = earlier.nodes
    block["this_run_releases"] = count_releases(root) - earlier.nodes
    block["figures"] = "lifetime (earlier releases included)" if earlier.nodes else "this run's"
    parties: dict[str, Any] = {}
    if server and (persistent or server.get("earlier_releases")):
        parties["server"] = dict(server)
    if persistent and earlier.marks is not None:
        parties.update(party_figures(root, earlier.marks, float(cfg.get("dp-delta", 1e-5))))
    if parties:
        block["parties"] = parties
    return block


def lifetime_lines(block: Mapping[str, Any]) -> list[str]:
    """The console's lines of this run's ε beside the lifetime ε (none for a fresh
    federation: there both are the same, the summary's privacy line says it)."""
    parties = dict(block.get("parties") or {})
    lines = []
    server = parties.pop("server", None)
    if server:
        lines.append(
            f"{PREFIX}   server   this run's ε {_eps(server['this_run_epsilon'])} "
            f"({server['this_run_releases']} releases), lifetime ε "
            f"{_eps(server['lifetime_epsilon'])} ({server['earlier_releases']} earlier "
            f"releases) at δ {server['delta']:g}"
        )
    nodes = [p for p in parties.values() if "lifetime_epsilon" in p]
    if nodes:
        this = _eps(max(float(p["this_run_epsilon"]) for p in nodes))
        life = _eps(max(float(p["lifetime_epsilon"]) for p in nodes))
        earlier = sum(int(p["earlier_releases"]) for p in nodes)
        lines.append(
            f"{PREFIX}   nodes    this run's ε up to {this}, lifetime ε up to {life} "
            f"({earlier} earlier releases over {len(nodes)} nodes) at δ {nodes[0]['delta']:g}"
        )
    return lines


def _eps(value: float | str) -> str:
    """ε as the console writes it (4 significant digits; ``inf`` for no noise)."""
    return f"{float(value):.4g}"
