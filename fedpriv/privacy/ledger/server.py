"""The server's own release ledger: what it released, in every run of the same federation.

A server-side noising mode (``global-dp``, ``adaptive-clip``: the wrappers of
:mod:`fedpriv.strategies.dp_core` holding an accountant) releases one noised aggregate a round;
each release is one row of the same store the nodes use (:mod:`fedpriv.privacy.ledger.store`,
party ``server``) in the server's own state folder, charged BEFORE the aggregate leaves
(:meth:`ServerLedger.charge`: one ``BEGIN IMMEDIATE`` transaction reads the stored events,
decides the lifetime budget and appends the row). The row holds the round's ``DpEvent``
(the one the run's accountant composes) and, in its ``sequence`` column, the neighbouring
relation that event is accounted under (DP-FTRL: one row per tree, replace-special, charged
whole when the tree opens, :mod:`fedpriv.strategies.dp_ftrl`; client budgets keep one row per
client instead, :mod:`fedpriv.privacy.ledger.per_client`). The server's lifetime ε is

    ε_lifetime(δ) = ε(compose(e_1, ..., e_k); δ)

over every stored event, each with the settings (z, sampling, m) of its own run, at the δ of
the current run (:func:`fedpriv.privacy.ledger.events.compose_epsilon`); "this run's ε" is the
composition of the rows of this run only (the run's accountant gives the same figure on a
fresh ledger). Events of one ledger must share one relation: a run whose accountant uses
another (``client-sampling = fixed``: replace-one; ``poisson``: add/remove-one) is refused
at its start in one line (two relations have no single composition).

``server-max-epsilon`` > 0 caps the lifetime ε: a round whose event would push the
composition past it is not released (nothing is charged, the run ends early, saying so).

Where (:func:`server_state_dir`): the run config's ``server-state-dir`` (a deployment), else
``$FEDPRIV_SERVER_STATE_DIR`` (set by fedpriv's simulation launcher: ``<federation-dir>/server``
with a persistent federation, else :data:`PER_RUN`, the run's own ``<output-dir>/server-state``),
else none: the run is accounted by its own accountant only (one line at start), and a server
budget is refused. The folder is checked as a node's
(:func:`fedpriv.privacy.ledger.folder.checked_folder`: this user's, 0700, no foreign link).
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
from fedpriv.privacy.ledger.folder import StateFolderError, checked_file, checked_folder
from fedpriv.privacy.ledger.store import DB_NAME, LedgerStore, Row

__all__ = [
    "PER_CLIENT_PARTY",
    "PER_RUN",
    "SERVER_BUDGET_KEY",
    "SERVER_PARTY",
    "SERVER_STATE_ENV",
    "SERVER_STATE_FOLDER",
    "SERVER_STATE_KEY",
    "ServerLedger",
    "ServerLedgerError",
    "open_store",
    "server_folder_refusal",
    "server_state_dir",
]

SERVER_PARTY = "server"
PER_CLIENT_PARTY = "server-per-client"  # client-budgets: one row per client and release
SERVER_IDENTITY = 0
SERVER_STATE_KEY = "server-state-dir"  # the ServerApp's run config: its state folder
SERVER_BUDGET_KEY = "server-max-epsilon"  # the server's lifetime budget (0: none)
SERVER_STATE_ENV = "FEDPRIV_SERVER_STATE_DIR"  # set by the simulation launcher
SERVER_STATE_FOLDER = "server-state"  # <output-dir>/server-state: a fresh federation
PER_RUN = "per-run"  # $FEDPRIV_SERVER_STATE_DIR value: the run's own <output-dir>/server-state
_REL_TOL = 1e-9


class ServerLedgerError(ValueError):
    """A server state folder that cannot hold this run's releases (one line)."""


def server_state_dir(own: str, output_dir: str | Path,
                     env: Mapping[str, str] = os.environ) -> Optional[Path]:  # fmt: skip
    """The server's state folder (module docstring), or None (no ledger across runs); ``own``:
    the run's ``server-state-dir`` value ("" when unset)."""
    if own:
        return Path(own).expanduser()
    value = env.get(SERVER_STATE_ENV, "")
    if value == PER_RUN:
        return Path(output_dir) / SERVER_STATE_FOLDER
    return Path(value) if value else None


def relation_name(relation: Any) -> str:
    """The stored name of a ``dp_accounting.NeighboringRelation`` (``REPLACE_ONE``, ...)."""
    return str(getattr(relation, "name", relation))


def _relation(name: str) -> Any:
    from fedpriv.privacy.accounting import NeighborRel

    return NeighborRel[name]


def check_server_budget(max_epsilon: Optional[float]) -> None:
    """Refuse, in one line, a server budget that is not a finite float > 0 (None: no budget)."""
    if max_epsilon is not None and not (math.isfinite(max_epsilon) and max_epsilon > 0):
        raise ServerLedgerError(
            f"{SERVER_BUDGET_KEY} = {max_epsilon!r} is not allowed; expected a finite "
            "float > 0 (0 in the config: no budget)"
        )


@dataclass
class ServerLedger:
    """The server's ledger in ``<folder>/ledger.sqlite3`` for one run (picklable: paths and
    numbers only, so a checkpoint keeps ``run`` and a resumed run goes on as the same run).

    ``relation``: the run accountant's neighbouring relation (its name); ``delta``: the δ of
    the figures and of the budget; ``max_epsilon``: the lifetime budget (None: none)."""

    folder: str
    relation: str
    delta: float
    max_epsilon: Optional[float] = None
    run: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        check_server_budget(self.max_epsilon)

    @property
    def store(self) -> LedgerStore:
        return LedgerStore(self.folder)

    def open(self) -> LedgerStore:
        """The store, its folder and files checked, its relation this run's (else one line)."""
        return open_store(self.folder, SERVER_PARTY, self.relation)

    def _rows(self, db: Any = None) -> list[Row]:
        return self.store.rows(SERVER_PARTY, SERVER_IDENTITY, db)

    def _epsilon(self, events: list[str], extra: Any = None) -> float:
        parsed = [event_from_json(e) for e in events]
        if extra is not None:
            parsed.append(extra)
        return compose_epsilon(parsed, self.delta, _relation(self.relation))

    def budget_reason(self, epsilon: float, server_round: int) -> Optional[str]:
        """None within ``max_epsilon``; else the one line that ends the run."""
        if self.max_epsilon is None:
            return None
        if epsilon <= self.max_epsilon + _REL_TOL * max(1.0, self.max_epsilon):
            return None
        return (
            f"{SERVER_BUDGET_KEY} {self.max_epsilon:g} would be exceeded at round {server_round} "
            f"(the server's lifetime epsilon {epsilon:.4g} at delta {self.delta:g} over its "
            f"{len(self._rows()) + 1} releases in {self.folder}, this one included)"
        )

    def plan(self, event: Any, server_round: int) -> Optional[str]:
        """Before a round: why releasing ``event`` would pass the budget (nothing written)."""
        if self.max_epsilon is None:
            return None
        events = [r.event for r in self._rows()]
        return self.budget_reason(self._epsilon(events, event), server_round)

    def charge(self, event: Any, server_round: int) -> Optional[str]:
        """Decide and charge one release in one transaction, before it leaves: None when
        charged; the budget's one line when it is declined (nothing charged)."""
        store = self.open()
        text = event_to_json(event)
        with store.transaction() as db:
            if self.max_epsilon is not None:
                events = [r.event for r in self._rows(db)]
                why = self.budget_reason(self._epsilon(events, event), server_round)
                if why:
                    store.decline(db, SERVER_PARTY, SERVER_IDENTITY, why)
                    return why
            row = Row(self.relation, int(server_round), f"{self.run}/round-{int(server_round)}",
                      self.run, 1.0, text)  # fmt: skip
            store.charge(db, SERVER_PARTY, SERVER_IDENTITY, row)
        return None

    def figures(self) -> dict[str, Any]:
        """summary.json's server figures: this run's and the lifetime ε (at ``delta``), the
        releases of this run and of earlier runs, where, and the budget."""
        if not (Path(self.folder) / DB_NAME).exists():
            rows: list[Row] = []
        else:
            self.open()
            rows = self._rows()
        mine = [r.event for r in rows if r.run == self.run]
        return {
            "state-dir": str(self.folder),
            "this_run_releases": len(mine),
            "earlier_releases": len(rows) - len(mine),
            "this_run_epsilon": _plain(self._epsilon(mine)),
            "lifetime_epsilon": _plain(self._epsilon([r.event for r in rows])),
            "delta": self.delta,
            "adjacency": self.relation,
            SERVER_BUDGET_KEY: self.max_epsilon or 0.0,
        }


def open_store(folder: str, party: str, relation: str) -> LedgerStore:
    """The server's store in ``folder`` (folder and files checked, owner-only), refused in
    one line when it holds releases under another relation than ``relation`` or of the other
    kind of server ledger than ``party`` (every client alike, or each its own events)."""
    path = checked_folder(folder)
    for suffix in ("", "-wal", "-shm"):
        checked_file(path / f"{DB_NAME}{suffix}")
    store = LedgerStore(path)
    db = store.connect()
    for suffix in ("", "-wal", "-shm"):
        try:
            os.chmod(path / f"{DB_NAME}{suffix}", 0o600)
        except FileNotFoundError:
            pass
    other = db.execute(
        "SELECT DISTINCT sequence FROM releases WHERE party IN (?, ?) AND sequence != ?",
        (SERVER_PARTY, PER_CLIENT_PARTY, relation),
    ).fetchall()
    if other:
        raise ServerLedgerError(
            f"server state folder {folder!r} holds releases accounted under {other[0][0]} "
            f"adjacency; this run accounts {relation} (another client-sampling or privacy "
            "mode): their lifetime epsilon has no single composition; use another "
            "server-state-dir or federation-dir"
        )
    kind = PER_CLIENT_PARTY if party == SERVER_PARTY else SERVER_PARTY
    if db.execute("SELECT 1 FROM releases WHERE party = ? LIMIT 1", (kind,)).fetchone():
        theirs = "each client at its own rate" if kind == PER_CLIENT_PARTY else "every client alike"
        raise ServerLedgerError(
            f"server state folder {folder!r} holds releases of another privacy mode (charged "
            f"to {theirs}); this run's are not charged that way and have no single "
            "composition with them: use another server-state-dir or federation-dir"
        )
    return store


def _plain(epsilon: float) -> float | str:
    """ε for JSON: ``"inf"`` for a release without noise (z = 0), as the accountants write."""
    return epsilon if math.isfinite(epsilon) else "inf"


def open_server_ledger(
    folder: Optional[Path], relation: Any, delta: float, max_epsilon: Optional[float]
) -> Optional[ServerLedger]:
    """The run's :class:`ServerLedger` in ``folder``, checked now (None without a folder; a
    budget without one is refused in one line)."""
    if folder is None:
        if max_epsilon is not None:
            raise ServerLedgerError(
                f"{SERVER_BUDGET_KEY} = {max_epsilon:g} needs a server ledger: set "
                f"{SERVER_STATE_KEY} (a folder of the server's own user) in the run config"
            )
        return None
    ledger = ServerLedger(str(Path(os.path.abspath(folder))), relation_name(relation),
                          float(delta), max_epsilon)  # fmt: skip
    try:
        ledger.open()
    except StateFolderError as err:
        raise ServerLedgerError(server_folder_refusal(err)) from err
    return ledger


def server_folder_refusal(err: StateFolderError) -> str:
    """A state folder's one-line refusal, worded for the server's folder."""
    text = str(err).replace("client-state-dir", SERVER_STATE_KEY)
    return text.replace("a node's ledger", "the server's ledger").replace("this node's", "its")
