"""The server's release ledger when each client pays its own price (``client-budgets``).

Under ``privacy = client-budgets`` one noised aggregate costs client i its own event: it was
Poisson-sampled at its own rate q_i, so its round is ``PoissonSampledDpEvent(q_i,
GaussianDpEvent(z))`` (``GaussianDpEvent(z)`` at q_i = 1), whether it was sampled or not
(add/remove-one; :mod:`fedpriv.privacy.client_budgets`). The server's ledger
(:mod:`fedpriv.privacy.ledger.server`'s folder and store) therefore holds one row per client
and release, party ``server-per-client``, identity the client's partition, charged for every
client in ONE transaction before the aggregate leaves (:meth:`PerClientLedger.charge`).
Client i's lifetime ε is

    ε_i,lifetime(δ) = ε(compose(e_i,1, ..., e_i,k); δ)

over its stored events, each with the z and q_i of its own run
(:func:`fedpriv.privacy.ledger.events.compose_epsilon`: PLD and RDP, the smaller). What the
ledger reports (:meth:`PerClientLedger.figures`): every client's this-run and lifetime ε
(``per_client``) and, as the server's headline, the **largest** over clients; a release
counts once however many clients it charged. ``server-max-epsilon`` caps that largest
lifetime ε: a release that would push any client's composition past it is not made (nothing
charged). A folder that holds rows charged to every client alike (``global-dp``,
``adaptive-clip``, ``dp-ftrl``) is refused at the run's start, and the other way round: the
two kinds have no single composition here.
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from fedpriv.privacy.ledger.events import compose_epsilon, event_from_json, event_to_json
from fedpriv.privacy.ledger.server import (
    PER_CLIENT_PARTY,
    SERVER_BUDGET_KEY,
    SERVER_STATE_KEY,
    ServerLedgerError,
    check_server_budget,
    open_store,
)
from fedpriv.privacy.ledger.store import DB_NAME, LedgerStore, Row

__all__ = ["PerClientLedger", "open_per_client_ledger"]

_REL_TOL = 1e-9
ADD_OR_REMOVE = "ADD_OR_REMOVE_ONE"  # the relation of every per-client row


@dataclass
class PerClientLedger:
    """The server's per-client ledger in ``<folder>/ledger.sqlite3`` for one run (picklable:
    a checkpoint keeps ``run``). ``delta``: the δ of the figures and of the budget;
    ``max_epsilon``: the lifetime budget on the largest client's ε (None: none)."""

    folder: str
    delta: float
    max_epsilon: Optional[float] = None
    run: str = field(default_factory=lambda: uuid.uuid4().hex)
    relation: str = ADD_OR_REMOVE

    def __post_init__(self) -> None:
        check_server_budget(self.max_epsilon)

    def open(self) -> LedgerStore:
        """The store, checked (folder, files, relation, kind of rows; else one line)."""
        return open_store(self.folder, PER_CLIENT_PARTY, self.relation)

    def _rows(self, db: Any = None) -> dict[int, list[Row]]:
        """client -> its rows, oldest first."""
        db = db or LedgerStore(self.folder).connect()
        cur = db.execute(
            "SELECT identity, sequence, round, digest, run, cost, event FROM releases "
            "WHERE party = ? ORDER BY id",
            (PER_CLIENT_PARTY,),
        )
        out: dict[int, list[Row]] = {}
        for identity, *rest in cur.fetchall():
            out.setdefault(int(identity), []).append(Row(*rest))
        return out

    def _epsilons(self, histories: Mapping[int, list[str]]) -> dict[int, float]:
        """client -> ε of its events' composition (clients with the same history: once)."""
        cache: dict[tuple[str, ...], float] = {}
        out = {}
        for client, events in histories.items():
            key = tuple(events)
            if key not in cache:
                parsed = [event_from_json(e) for e in key]
                cache[key] = compose_epsilon(parsed, self.delta, _relation(self.relation))
            out[client] = cache[key]
        return out

    def _decide(self, db: Any, events: Mapping[int, Any], server_round: int) -> Optional[str]:
        """The budget's one line when ``events`` would push a client past it, else None."""
        if self.max_epsilon is None:
            return None
        stored = self._rows(db)
        histories = {c: [r.event for r in stored.get(c, [])] + [event_to_json(e)]
                     for c, e in events.items()}  # fmt: skip
        epsilons = self._epsilons(histories)
        client = max(epsilons, key=lambda c: epsilons[c], default=None)
        if client is None:
            return None
        worst = epsilons[client]
        if worst <= self.max_epsilon + _REL_TOL * max(1.0, self.max_epsilon):
            return None
        return (
            f"{SERVER_BUDGET_KEY} {self.max_epsilon:g} would be exceeded at round "
            f"{server_round} (client {client}'s lifetime epsilon {worst:.4g} at delta "
            f"{self.delta:g} over its {len(histories[client])} releases in {self.folder}, "
            "this one included)"
        )

    def plan(self, events: Mapping[int, Any], server_round: int) -> Optional[str]:
        """Before a round: why releasing with ``events`` (client -> its DpEvent) would pass
        the budget (nothing written)."""
        if self.max_epsilon is None:
            return None
        return self._decide(self.open().connect(), events, server_round)

    def charge(self, events: Mapping[int, Any], server_round: int) -> Optional[str]:
        """Decide and charge one release, one row per client, in one transaction before it
        leaves: None when charged; the budget's one line when declined (nothing charged)."""
        store = self.open()
        with store.transaction() as db:
            why = self._decide(db, events, server_round)
            if why:
                store.decline(db, PER_CLIENT_PARTY, 0, why)
                return why
            release = f"{self.run}/round-{int(server_round)}"
            for client, event in sorted(events.items()):
                row = Row(self.relation, int(server_round), f"{release}/client-{int(client)}",
                          self.run, 1.0, event_to_json(event))  # fmt: skip
                store.charge(db, PER_CLIENT_PARTY, int(client), row)
        return None

    def figures(self) -> dict[str, Any]:
        """summary.json's server figures: per client this run's and the lifetime ε; the
        largest of each as the headline; the releases (rounds) of this run and earlier."""
        rows = self._rows(self.open().connect()) if (Path(self.folder) / DB_NAME).exists() else {}
        mine = self._epsilons({c: [r.event for r in rs if r.run == self.run]
                               for c, rs in rows.items()})  # fmt: skip
        lifetime = self._epsilons({c: [r.event for r in rs] for c, rs in rows.items()})
        releases = {(r.run, r.round) for rs in rows.values() for r in rs}
        this_run = sum(1 for run, _ in releases if run == self.run)
        return {
            "state-dir": str(self.folder),
            "this_run_releases": this_run,
            "earlier_releases": len(releases) - this_run,
            "this_run_epsilon": _plain(max(mine.values(), default=0.0)),
            "lifetime_epsilon": _plain(max(lifetime.values(), default=0.0)),
            "epsilon_of": "the largest over clients (each client's own in per_client)",
            "per_client": {
                str(c): {
                    "this_run_epsilon": _plain(mine[c]),
                    "lifetime_epsilon": _plain(lifetime[c]),
                }
                for c in sorted(rows)
            },  # fmt: skip
            "delta": self.delta,
            "adjacency": self.relation,
            SERVER_BUDGET_KEY: self.max_epsilon or 0.0,
        }


def _relation(name: str) -> Any:
    from fedpriv.privacy.accounting import NeighborRel

    return NeighborRel[name]


def _plain(epsilon: float) -> float | str:
    return epsilon if math.isfinite(epsilon) else "inf"


def open_per_client_ledger(
    folder: Optional[Path], delta: float, max_epsilon: Optional[float]
) -> Optional[PerClientLedger]:
    """The run's :class:`PerClientLedger` in ``folder``, checked now (None without a folder;
    a budget without one is refused in one line, as for the server's other ledger)."""
    if folder is None:
        if max_epsilon is not None:
            raise ServerLedgerError(
                f"{SERVER_BUDGET_KEY} = {max_epsilon:g} needs a server ledger: set "
                f"{SERVER_STATE_KEY} (a folder of the server's own user) in the run config"
            )
        return None
    ledger = PerClientLedger(str(Path(os.path.abspath(folder))), float(delta), max_epsilon)
    _checked(ledger)
    return ledger


def _checked(ledger: PerClientLedger) -> None:
    from fedpriv.privacy.ledger.folder import StateFolderError
    from fedpriv.privacy.ledger.server import server_folder_refusal

    try:
        ledger.open()
    except StateFolderError as err:
        raise ServerLedgerError(server_folder_refusal(err)) from err
