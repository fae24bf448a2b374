"""Each noising party counts its own releases, over its lifetime: a locked, event-level ledger.

A client, a zone node or the server that adds privacy noise keeps its own ledger of what it
released, in a state folder it owns (never one named by a message or chosen by a run), and
decides itself whether a request may produce a new release:

* **Where.** :func:`node_dir`: the node's own ``client-state-dir`` (its ``node_config``, read
  by ``fedpriv.scenarios.config.node_roles.node_ledger``); else the state root its own
  process was started with, ``$FEDPRIV_STATE_ROOT/node-<data key>`` (the data key a digest of
  the node's RESOLVED data settings: the same data is the same folder, however it was
  spelled). fedpriv's simulation launcher sets that root to the run's output folder
  (``<output-dir>/node-state``: a fresh federation per experiment) or to the researcher's
  ``federation-dir`` (a persistent one); a deployed node sets ``client-state-dir``. A node
  with neither has no folder (:data:`NO_FOLDER`) and refuses to release anything, saying what
  to set: nothing lives in a shared temporary folder by default. The folder is checked
  (:func:`fedpriv.privacy.ledger.folder.checked_folder`: this user's, 0700, no foreign link).
* **What.** One SQLite database per folder (:mod:`fedpriv.privacy.ledger.store`): a row per
  release with its sequence, round, request digest, run, cost (in the party's own unit: GP
  leakage, μ², one per DP-SGD participation, ...) and its own ``DpEvent``; the ledger view
  (:class:`Ledger`) is the fold of the party's rows: total ``releases``, ``spent``,
  ``declined`` requests, per *sequence* — what the party releases under one mechanism, named
  from the node's own settings only (:func:`fedpriv.clients.releases.sequence_of`) — the
  lifetime count and the digest of every request it answered; per sequence and run, the run's
  last round and count (for the in-run rewind rule and the per-run limit).
* **Repeats, in any run.** :meth:`ReleaseCounter.begin` answers a request with a
  :class:`Ticket`: ``repeat`` — a request identical to one the sequence already answered
  (same round, same arrays: its digest), from this run or any other: the caller replies with
  the cached reply (:meth:`ReleaseCounter.cached`, the same arrays bit for bit, no fresh
  noise) or, when that reply is no longer cached, the request is ``refused``; ``fresh`` — a
  new release, already charged and committed (charge BEFORE release: one ``BEGIN IMMEDIATE``
  transaction decides and charges, across threads and processes, and commits with a full
  sync before the caller computes anything, so a crash never loses a charge);
  ``refused`` / ``declined`` — nothing is released. Under ``rewind = "refuse"`` (a zone node)
  a request of a run for a round at or before that run's last release is refused; under
  ``rewind = "charge"`` (DP-SGD, IFCA: their ε or leakage is computed from the node's own
  ledger) it is a new release and is charged. ``max_releases`` caps a run's releases of a
  sequence (a zone node: its own ``num-server-rounds``); ``budget`` caps the lifetime
  ``spent`` of the party (IFCA: its own ``leakage-budget``); ``epsilon_budget`` = (ε, δ) caps
  the ε of the composition of the party's stored events with the new one (DP-SGD: its own
  ``max-epsilon``): past either a request is declined with one line.
* **Whose data.** ``data`` (the node's resolved data settings) is bound to the party's
  identity at its first release; a later request on other data is refused in one line.

This module imports no Flower: the Flower adapters (records, contexts) are in
:mod:`fedpriv.clients.releases`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from fedpriv.privacy.ledger.events import (
    NOT_A_DP_EVENT,
    compose_epsilon,
    event_from_json,
    event_to_json,
)
from fedpriv.privacy.ledger.folder import StateFolderError, checked_file, checked_folder
from fedpriv.privacy.ledger.store import (
    DB_NAME,
    LedgerStore,
    Row,
    Snapshot,
    pack_reply,
    unpack_reply,
)

__all__ = [
    "NO_FOLDER",
    "STATE_DIR_KEY",
    "STATE_ROOT_ENV",
    "Ledger",
    "ReleaseCounter",
    "StateFolderError",
    "Ticket",
    "data_key",
    "node_dir",
    "read_ledger",
]

STATE_DIR_KEY = "client-state-dir"  # a node's own config: where it keeps its ledgers
STATE_ROOT_ENV = "FEDPRIV_STATE_ROOT"  # the state root of a node's own process
NODE_DIR_PREFIX = "node-"  # a folder under the root: <root>/node-<data key>
NO_FOLDER = "<no client-state-dir>"  # a node with neither: it releases nothing
Rewind = Literal["refuse", "charge"]
_REL_TOL = 1e-9  # float sums of costs against a budget


def default_root() -> Path | None:
    """``$FEDPRIV_STATE_ROOT`` of this process (None: unset; there is no shared default)."""
    root = os.environ.get(STATE_ROOT_ENV, "")
    return Path(root) if root else None


def data_key(settings: Mapping[str, Any]) -> str:
    """A short digest of a node's own (resolved) data settings (the same data: the same key)."""
    text = repr(sorted((str(k), repr(v)) for k, v in settings.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_dir(own_dir: str, key: str) -> Path:
    """The node's own state folder: ``own_dir`` (its own ``client-state-dir``), else
    ``$FEDPRIV_STATE_ROOT/node-<key>`` (``key``: :func:`data_key` of its resolved data
    settings), else :data:`NO_FOLDER` (a :class:`ReleaseCounter` there refuses, saying what to
    set). ``""`` and ``"auto"`` name no folder. Never a message's value or a run id."""
    if _names_a_folder(own_dir):
        return Path(own_dir)
    root = default_root()
    if root is None:
        return Path(NO_FOLDER)
    return root / f"{NODE_DIR_PREFIX}{key or 'default'}"


def _names_a_folder(value: str | None) -> bool:
    return bool(value) and value != "auto"


def no_folder_reason(party: str) -> str:
    """The one line of a noising node without a state folder."""
    return (
        f"this {party} node adds noise or keeps a budget but has no state folder for its "
        f"ledger: set {STATE_DIR_KEY} in its node config (flower-supernode --node-config "
        f"\"{STATE_DIR_KEY}='/var/lib/fedpriv/node-1'\") or {STATE_ROOT_ENV} in its environment"
    )


@dataclass
class Ledger:
    """A party's own release ledger (see the module docstring)."""

    releases: int = 0
    spent: float = 0.0
    declined: int = 0
    sequences: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)  # each release's DpEvent (JSON), if any

    def to_json(self) -> dict[str, Any]:
        return {
            "releases": self.releases,
            "spent": self.spent,
            "declined": self.declined,
            "sequences": self.sequences,
            "runs": self.runs,
        }

    def answered(self, sequence: str, digest: str) -> bool:
        return digest in self.sequences.get(sequence, {}).get("digests", ())

    def lifetime_epsilon(self, delta: float, relation: Any = None) -> float:
        """ε at ``delta`` of every stored event composed (0 when none)."""
        return compose_epsilon((event_from_json(e) for e in self.events), delta, relation)


def _fold(rows: list[Row], declined: int) -> Ledger:
    ledger = Ledger(declined=declined)
    for row in rows:
        ledger.releases += 1
        ledger.spent += row.cost
        seq = ledger.sequences.setdefault(row.sequence, {"count": 0, "digests": []})
        seq["count"] += 1
        seq["digests"].append(row.digest)
        key = f"{row.sequence}/{row.run}"
        count = ledger.runs.get(key, {}).get("count", 0)
        ledger.runs[key] = {"round": int(row.round), "count": int(count) + 1}
        if row.event != NOT_A_DP_EVENT:
            ledger.events.append(row.event)
    return ledger


@dataclass(frozen=True)
class Ticket:
    """The answer to one request: ``kind`` is ``fresh`` | ``repeat`` | ``refused`` |
    ``declined``; ``releases``: the party's total after it (a fresh release included);
    ``epsilon``: ε at the budget's δ of the party's stored events and this one composed, when
    an ``epsilon_budget`` made the counter compute it (the party reuses it: one composition
    per release), else None."""

    kind: str
    releases: int
    spent: float
    reason: str = ""
    epsilon: Optional[float] = None

    @property
    def fresh(self) -> bool:
        return self.kind == "fresh"


_CHECKED: set[str] = set()  # folders this process checked (once each)
_CHECKED_GUARD = threading.Lock()


class ReleaseCounter:
    """One party's ledger in ``<directory>/ledger.sqlite3`` and its cached replies."""

    def __init__(self, directory: str | Path, party: str, identity: int) -> None:
        self.directory = Path(directory)
        self.party, self.identity = str(party), int(identity)
        self.store = LedgerStore(self.directory)
        self.path = self.store.path

    def __repr__(self) -> str:
        return f"ReleaseCounter({str(self.path)!r}, {self.party!r}, {self.identity})"

    def _open(self) -> LedgerStore:
        """The store, its folder and files checked (once per process and folder)."""
        if str(self.directory) == NO_FOLDER:
            raise StateFolderError(no_folder_reason(self.party))
        key = str(self.directory)
        if key not in _CHECKED:
            with _CHECKED_GUARD:
                checked_folder(self.directory)
                for suffix in ("", "-wal", "-shm"):
                    checked_file(self.directory / f"{DB_NAME}{suffix}")
                _CHECKED.add(key)
            self.store.connect()
            _owner_only(self.path)
        return self.store

    def load(self) -> Ledger:
        """The ledger as committed (empty when there is none yet)."""
        if str(self.directory) == NO_FOLDER or not self.path.exists():
            return Ledger()
        store = self._open()
        rows = store.rows(self.party, self.identity)
        return _fold(rows, store.declined(self.party, self.identity))

    def begin(
        self,
        sequence: str,
        server_round: int,
        digest: str,
        *,
        run: str = "",
        cost: float = 1.0,
        budget: Optional[float] = None,
        budget_name: str = "budget",
        max_releases: Optional[int] = None,
        rewind: Rewind = "refuse",
        event: Any = None,
        epsilon_budget: Optional[tuple[float, float]] = None,
        data: Optional[Mapping[str, Any]] = None,
    ) -> Ticket:
        """Decide one request (module docstring); a ``fresh`` ticket is charged and
        committed before this returns. ``digest`` (of the request's round and content) finds
        a repeat in any run; ``run`` (the run it comes from) only scopes the in-run rewind
        rule and ``max_releases``: it never resets a count or the budget. ``event``: the
        release's ``DpEvent`` (stored with it); ``epsilon_budget``: (max ε, δ) of the
        composition of the stored events and ``event``; ``data``: the node's resolved data
        settings, bound to its identity at its first release."""
        if rewind not in ("refuse", "charge"):
            raise ValueError(f"rewind = {rewind!r} is not allowed; expected 'refuse' or 'charge'")
        cost = float(cost)
        if math.isnan(cost) or cost < 0:
            raise ValueError(f"cost = {cost!r} is not allowed; expected a number >= 0")
        request = _Request(
            sequence, int(server_round), digest, str(run), cost, budget, budget_name,
            max_releases, rewind, event, epsilon_budget, data,
        )  # fmt: skip
        store = self._open()
        with store.transaction() as db:
            return self._decide(store, db, request)

    def _decide(self, store: LedgerStore, db: Any, req: _Request) -> Ticket:
        refused = self._wrong_data(store, db, req.data)
        now = store.snapshot(db, self.party, self.identity, req.sequence, req.digest, req.run)
        releases, spent = now.releases, now.spent
        if refused:
            return Ticket("refused", releases, spent, refused)
        if now.answered:
            if self.cached(req.sequence, req.round, req.digest) is not None:
                return Ticket("repeat", releases, spent)
            why = (
                f"round {req.round} with these arrays was already answered (in this "
                "or an earlier run); an identical request gets no fresh noise"
            )
            return Ticket("refused", releases, spent, why)
        why = _rewound_or_capped(now, req)
        if why:
            return Ticket("refused", releases, spent, why)
        why, eps = _over_budget(now, req, lambda: store.events(db, self.party, self.identity))
        if why:
            store.decline(db, self.party, self.identity, why)
            return Ticket("declined", releases, spent, why)
        event = NOT_A_DP_EVENT if req.event is None else event_to_json(req.event)
        row = Row(req.sequence, req.round, req.digest, req.run, req.cost, event)
        store.charge(db, self.party, self.identity, row)  # committed before any release
        return Ticket("fresh", releases + 1, spent + req.cost, epsilon=eps)

    def _wrong_data(self, store: LedgerStore, db: Any, data: Optional[Mapping[str, Any]]) -> str:
        if data is None:
            return ""
        text = json.dumps({str(k): data[k] for k in sorted(data)}, default=str)
        bound = store.data_of(self.party, self.identity, db)
        if bound is None:
            store.bind_data(db, self.party, self.identity, text)
            return ""
        if bound == text:
            return ""
        return (
            f"this node's ledger in {str(self.directory)!r} belongs to other data ({bound}); "
            f"asked to train on {text}: refused (another dataset is another node: give it "
            f"its own {STATE_DIR_KEY})"
        )

    def remember(self, sequence: str, server_round: int, digest: str, reply: Any) -> None:
        """Cache the reply of the sequence's last release (plain records, stored as an
        ``.npz`` blob: :func:`fedpriv.privacy.ledger.store.pack_reply`)."""
        blob = pack_reply(reply)
        self._open().remember(self.party, self.identity, sequence, server_round, digest, blob)

    def cached(self, sequence: str, server_round: int, digest: str) -> Any:
        """The cached reply of this exact request, or None."""
        blob = self._open().reply(self.party, self.identity, sequence, server_round, digest)
        if blob is None:
            return None
        try:
            return unpack_reply(blob)
        except (ValueError, OSError, KeyError, zipfile.BadZipFile):  # damaged: no cache
            return None


@dataclass(frozen=True)
class _Request:
    sequence: str
    round: int
    digest: str
    run: str
    cost: float
    budget: Optional[float]
    budget_name: str
    max_releases: Optional[int]
    rewind: Rewind
    event: Any
    epsilon_budget: Optional[tuple[float, float]]
    data: Optional[Mapping[str, Any]]


def _rewound_or_capped(now: Snapshot, req: _Request) -> str:
    if now.run_round is not None and req.round <= int(now.run_round) and req.rewind == "refuse":
        return (
            f"round {req.round} is not after round {int(now.run_round)}, "
            "which this node already released"
        )
    if req.max_releases is not None and now.run_count >= int(req.max_releases):
        return f"this node's own limit of {int(req.max_releases)} releases is reached"
    return ""


def _over_budget(
    now: Snapshot, req: _Request, stored: Callable[[], list[str]]
) -> tuple[str, Optional[float]]:
    """(why the request passes a budget, "" if none; ε of the stored events and this one
    when an ``epsilon_budget`` asked for it, else None)."""
    if req.budget is not None and not _within(now.spent + req.cost, float(req.budget)):
        return (
            f"this node's lifetime {req.budget_name} would be exceeded (spent "
            f"{now.spent:g} of {float(req.budget):g} over {now.releases} releases)"
        ), None
    if req.epsilon_budget is not None and req.event is None:
        return f"this node's lifetime {req.budget_name} holds no release without noise", None
    if req.epsilon_budget is None:
        return "", None
    max_eps, delta = req.epsilon_budget
    events = [event_from_json(e) for e in stored()] + [req.event]
    eps = compose_epsilon(events, delta)
    if not _within(eps, float(max_eps)):
        return (
            f"this node's lifetime {req.budget_name} would be exceeded (ε {eps:.4g} at "
            f"δ = {delta:g} over its {len(events)} releases, this one included)"
        ), eps
    return "", eps


def _owner_only(path: Path) -> None:
    """The database and its companions readable by their owner only."""
    for suffix in ("", "-wal", "-shm"):
        try:
            os.chmod(path.with_name(path.name + suffix), 0o600)
        except FileNotFoundError:
            pass


def read_ledger(folder: str | Path, party: str, identity: int) -> Ledger:
    """The ledger of one party in a state folder."""
    return ReleaseCounter(folder, party, identity).load()


def _within(total: float, budget: float) -> bool:
    return math.isinf(budget) or total <= budget + _REL_TOL * max(1.0, budget)
