"""The server's ledger of a run: attached to its DP wrapper, reported in summary.json.

:func:`attach_server_ledger` gives a server-side DP wrapper with an accountant (``global-dp``,
``adaptive-clip``) the run's :class:`fedpriv.privacy.ledger.server.ServerLedger` in the
server's state folder (:func:`fedpriv.privacy.ledger.server.server_state_dir`), checked before
any training; without a folder (a deployment without ``server-state-dir``) the run says in one
line that its server ε covers this run only, and a ``server-max-epsilon`` is refused.
summary.json's ``server_ledger`` block is the ledger's figures
(:func:`fedpriv.scenarios.app.round_loop.server_ledger_figures`).
"""

from __future__ import annotations

from logging import INFO
from typing import Any, Optional

from fedpriv.scenarios.config.specs import ServerRun
from flwr.common import log

from fedpriv.privacy.accounting.events import relation_for
from fedpriv.privacy.ledger.server import (
    SERVER_BUDGET_KEY,
    SERVER_STATE_KEY,
    open_server_ledger,
    server_state_dir,
)

__all__ = ["attach_server_ledger", "server_budget"]

NO_LEDGER_LINE = (
    "fedpriv: no " + SERVER_STATE_KEY + ": the server's epsilon covers this run only (its "
    "accountant); set " + SERVER_STATE_KEY + " for a ledger over every run of this federation"
)


def server_budget(cfg: Any) -> Optional[float]:
    """``server-max-epsilon`` (0 in the config: None, no budget)."""
    value = float(cfg.get(SERVER_BUDGET_KEY, 0.0) or 0.0)
    return value if value > 0 else None


def attach_server_ledger(wrapper: Any, run: ServerRun) -> Any:
    """``wrapper`` with the run's server ledger (see the module docstring); returns it."""
    accountant = getattr(wrapper, "accountant", None)
    if accountant is None:
        return wrapper
    cfg = run.record
    folder = server_state_dir(str(cfg.get(SERVER_STATE_KEY, "") or ""), run.spec.output_dir)
    budget = server_budget(cfg)
    relation = relation_for(accountant.sampling)
    wrapper.server_ledger = open_server_ledger(folder, relation, accountant.delta, budget)
    if wrapper.server_ledger is None:
        log(INFO, "%s", NO_LEDGER_LINE)
    return wrapper
