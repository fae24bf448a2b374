"""The server's ledger of a run: attached to its DP wrapper, reported in summary.json.

:func:`attach_server_ledger` gives a server-side DP wrapper with an accountant (``global-dp``,
``adaptive-clip``) the run's :class:`fedpriv.privacy.ledger.server.ServerLedger` in the
server's state folder; :func:`attach_tree_ledger` gives DP-FTRL's wrapper one under
replace-special (a row per tree), :func:`attach_per_client_ledger` the client-budgets wrapper a
:class:`fedpriv.privacy.ledger.per_client.PerClientLedger` (a row per client and release). The
folder (:func:`fedpriv.privacy.ledger.server.server_state_dir`) is checked before any
training; without a folder (a deployment without ``server-state-dir``) the run says in one
line that its server ε covers this run only, and a ``server-max-epsilon`` is refused.
summary.json's ``server_ledger`` block is the ledger's figures
(:func:`fedpriv.scenarios.app.round_loop.server_ledger_figures`).
"""

from __future__ import annotations

from logging import INFO
from pathlib import Path
from typing import Any, Optional

from fedpriv.scenarios.config.specs import ServerRun
from flwr.common import log

from fedpriv.privacy.accounting.events import NeighborRel, relation_for
from fedpriv.privacy.ledger.server import (
    SERVER_BUDGET_KEY,
    SERVER_STATE_KEY,
    open_server_ledger,
    server_state_dir,
)

__all__ = [
    "attach_per_client_ledger",
    "attach_server_ledger",
    "attach_tree_ledger",
    "server_budget",
]

NO_LEDGER_LINE = (
    "fedpriv: no " + SERVER_STATE_KEY + ": the server's epsilon covers this run only (its "
    "accountant); set " + SERVER_STATE_KEY + " for a ledger over every run of this federation"
)


def server_budget(cfg: Any) -> Optional[float]:
    """``server-max-epsilon`` (0 in the config: None, no budget)."""
    value = float(cfg.get(SERVER_BUDGET_KEY, 0.0) or 0.0)
    return value if value > 0 else None


def _folder(run: ServerRun) -> Optional[Path]:
    return server_state_dir(str(run.record.get(SERVER_STATE_KEY, "") or ""), run.spec.output_dir)


def _attached(wrapper: Any, ledger: Any) -> Any:
    wrapper.server_ledger = ledger
    if ledger is None:
        log(INFO, "%s", NO_LEDGER_LINE)
    return wrapper


def attach_server_ledger(wrapper: Any, run: ServerRun) -> Any:
    """``wrapper`` with the run's server ledger (see the module docstring); returns it."""
    accountant = getattr(wrapper, "accountant", None)
    if accountant is None:
        return wrapper
    relation = relation_for(accountant.sampling)
    ledger = open_server_ledger(_folder(run), relation, accountant.delta, server_budget(run.record))
    return _attached(wrapper, ledger)


def attach_tree_ledger(wrapper: Any, run: ServerRun) -> Any:
    """DP-FTRL's wrapper with the server's ledger of trees (replace-special, one row per tree:
    :mod:`fedpriv.strategies.dp_ftrl`); returns it."""
    relation = NeighborRel.REPLACE_SPECIAL
    ledger = open_server_ledger(_folder(run), relation, wrapper.delta, server_budget(run.record))
    return _attached(wrapper, ledger)


def attach_per_client_ledger(wrapper: Any, run: ServerRun) -> Any:
    """The client-budgets wrapper with the server's per-client ledger (one row per client and
    release: :mod:`fedpriv.privacy.ledger.per_client`); returns it."""
    from fedpriv.privacy.ledger.per_client import open_per_client_ledger

    ledger = open_per_client_ledger(_folder(run), wrapper.delta, server_budget(run.record))
    return _attached(wrapper, ledger)
