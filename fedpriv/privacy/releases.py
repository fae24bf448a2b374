"""Each noising party counts its own releases, over its lifetime: a monotonic, persisted ledger.

A client, a zone node or the server that adds privacy noise keeps its own ledger of what it
released, in a state directory it owns (never one named by a message or chosen by a run), and
decides itself whether a request may produce a new release:

* **Where.** :func:`node_dir`: the node's own ``client-state-dir`` (its ``node_config``, read
  by ``fedpriv.scenarios.config.node_roles.node_ledger``); else a per-node default outside every
  run's output folder, ``$FEDPRIV_STATE_ROOT`` (default ``<tempdir>/fedpriv-state-<uid>``)
  ``/node-<data key>``, where the data key is a digest of the node's own data settings
  (dataset, partitioning, clients, seed: the same data is the same node). Neither the run id,
  nor the Flower node id, nor the run's output folder selects it: a new run, a resumed run
  (a new run id) and a restarted node find the same ledger. One file per party and identity
  in it, ``<party>-<identity>.json`` (identity: the node's own ``partition-id``, a zone
  node's zone id): an append-only journal of JSON lines, one synced line per charge
  (:mod:`fedpriv.privacy.journal`; a ledger written before the journal is its first line).
* **What.** The ledger holds the node's total ``releases`` (monotonic), the ``spent`` cost
  (in the party's own unit: GP leakage, one per DP-SGD participation, ...), ``declined``
  requests, and per *sequence* — what the party releases under one mechanism, named from the
  node's own settings only (:func:`fedpriv.clients.releases.sequence_of`) — the lifetime count and
  the digest of every request it answered; per sequence and run, the run's last round and
  count (for the in-run rewind rule and the per-run limit).
* **Repeats, in any run.** :meth:`ReleaseCounter.begin` answers a request with a
  :class:`Ticket`: ``repeat`` — a request identical to one the sequence already answered
  (same round, same arrays: its digest), from this run or any other: the caller replies with
  the cached reply (:meth:`ReleaseCounter.cached`, the same arrays bit for bit, no fresh
  noise) or, when that reply is no longer cached, the request is ``refused``; ``fresh`` — a
  new release, already charged and persisted (charge BEFORE release: its journal line is
  appended and ``fdatasync``-ed before the caller computes anything, so a crash never loses
  a charge; a line torn by a crash counts as a charge); ``refused`` / ``declined`` —
  nothing is released. Under
  ``rewind = "refuse"`` (a zone node) a request of a run for a round at or before that run's
  last release is refused; under ``rewind = "charge"`` (DP-SGD, IFCA: their ε or leakage is
  computed from the node's own count) it is a new release and is charged. ``max_releases``
  caps a run's releases of a sequence (a zone node: its own ``num-server-rounds``);
  ``budget`` caps the lifetime ``spent`` of the party (IFCA: its own ``leakage-budget``;
  DP-SGD: the participations its own ``max-epsilon`` allows): past it a request is declined
  with one line.

This module imports no Flower: the Flower adapters (records, contexts) are in
:mod:`fedpriv.clients.releases`.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from fedpriv.privacy.journal import JournalState, append_line, lock_of, read_journal

__all__ = [
    "STATE_DIR_KEY",
    "STATE_ROOT_ENV",
    "Ledger",
    "ReleaseCounter",
    "Ticket",
    "data_key",
    "node_dir",
    "read_ledger",
]

STATE_DIR_KEY = "client-state-dir"  # a node's own config: where it keeps its ledgers
STATE_ROOT_ENV = "FEDPRIV_STATE_ROOT"  # the default root of per-run state directories
NODE_DIR_PREFIX = "node-"  # a per-node default folder: <root>/node-<data key>
Rewind = Literal["refuse", "charge"]
_REL_TOL = 1e-9  # float sums of costs against a budget


def default_root() -> Path:
    """``$FEDPRIV_STATE_ROOT``, else ``<tempdir>/fedpriv-state-<uid>``."""
    root = os.environ.get(STATE_ROOT_ENV, "")
    if root:
        return Path(root)
    return Path(tempfile.gettempdir()) / f"fedpriv-state-{os.getuid()}"


def data_key(settings: Mapping[str, Any]) -> str:
    """A short digest of a node's own data settings (the same data: the same key)."""
    text = repr(sorted((str(k), repr(v)) for k, v in settings.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_dir(own_dir: str, key: str) -> Path:
    """The node's own state directory: ``own_dir`` (its own ``client-state-dir``), else
    ``default_root()/node-<key>`` (``key``: :func:`data_key` of its own data settings).
    ``""`` and ``"auto"`` name no directory. Never a message's value, a run id or a run's
    output folder."""
    if _names_a_folder(own_dir):
        return Path(own_dir)
    return default_root() / f"{NODE_DIR_PREFIX}{key or 'default'}"


def _names_a_folder(value: str | None) -> bool:
    return bool(value) and value != "auto"


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file (fsynced when ``durable``) and
    ``os.replace``: a reader sees the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass
class Ledger:
    """A party's own release ledger (see the module docstring)."""

    releases: int = 0
    spent: float = 0.0
    declined: int = 0
    sequences: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "releases": self.releases,
            "spent": self.spent,
            "declined": self.declined,
            "sequences": self.sequences,
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        return cls(
            releases=int(data["releases"]),
            spent=float(data["spent"]),
            declined=int(data["declined"]),
            sequences={str(k): dict(v) for k, v in data["sequences"].items()},
            runs={str(k): dict(v) for k, v in data.get("runs", {}).items()},
        )


@dataclass(frozen=True)
class Ticket:
    """The answer to one request: ``kind`` is ``fresh`` | ``repeat`` | ``refused`` |
    ``declined``; ``releases``: the party's total after it (a fresh release included)."""

    kind: str
    releases: int
    spent: float
    reason: str = ""

    @property
    def fresh(self) -> bool:
        return self.kind == "fresh"


class ReleaseCounter:
    """The ledger file ``<directory>/<party>-<identity>.json`` and its cached replies."""

    def __init__(self, directory: str | Path, party: str, identity: int) -> None:
        self.directory = Path(directory)
        self.party, self.identity = str(party), int(identity)
        self.path = self.directory / f"{self.party}-{self.identity}.json"

    def __repr__(self) -> str:
        return f"ReleaseCounter({str(self.path)!r})"

    def load(self) -> Ledger:
        """The ledger as persisted (empty when there is no file yet)."""
        return _ledger_of(read_journal(self.path))

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
    ) -> Ticket:
        """Decide one request (module docstring); a ``fresh`` ticket is charged and
        persisted before this returns. ``digest`` (of the request's round and content) finds
        a repeat in any run; ``run`` (the run it comes from) only scopes the in-run rewind
        rule and ``max_releases``: it never resets a count or the budget."""
        if rewind not in ("refuse", "charge"):
            raise ValueError(f"rewind = {rewind!r} is not allowed; expected 'refuse' or 'charge'")
        with lock_of(self.path):
            return self._decide(
                sequence, int(server_round), digest, str(run), float(cost), budget,
                budget_name, max_releases, rewind,
            )  # fmt: skip

    def _decide(
        self,
        sequence: str,
        server_round: int,
        digest: str,
        run: str,
        cost: float,
        budget: Optional[float],
        budget_name: str,
        max_releases: Optional[int],
        rewind: Rewind,
    ) -> Ticket:
        state = read_journal(self.path)
        releases, spent = state.total_releases(), state.total_spent()
        if state.is_answered(sequence, digest):
            if self.cached(sequence, server_round, digest) is not None:
                return Ticket("repeat", releases, spent)
            why = (
                f"round {server_round} with these arrays was already answered (in this "
                "or an earlier run); an identical request gets no fresh noise"
            )
            return Ticket("refused", releases, spent, why)
        in_run = state.runs.get(f"{sequence}/{run}")
        if in_run is not None and server_round <= int(in_run["round"]) and rewind == "refuse":
            why = (
                f"round {server_round} is not after round {int(in_run['round'])}, "
                "which this node already released"
            )
            return Ticket("refused", releases, spent, why)
        count = 0 if in_run is None else int(in_run["count"])
        if max_releases is not None and count >= int(max_releases):
            why = f"this node's own limit of {int(max_releases)} releases is reached"
            return Ticket("refused", releases, spent, why)
        if budget is not None and not _within(spent + cost, float(budget)):
            append_line(self.path, {"declined": 1})
            why = (
                f"this node's lifetime {budget_name} would be exceeded (spent {spent:g} "
                f"of {float(budget):g} over {releases} releases)"
            )
            return Ticket("declined", releases, spent, why)
        entry = {"charge": sequence, "cost": cost, "digest": digest, "round": server_round}
        append_line(self.path, {**entry, "run": run})  # charged (synced) before any release
        return Ticket("fresh", releases + 1, spent + cost)

    def _reply_path(self, sequence: str) -> Path:
        return self.directory / f"{self.party}-{self.identity}.{sequence}.reply.pkl"

    def remember(self, sequence: str, server_round: int, digest: str, reply: Any) -> None:
        """Cache the reply of the sequence's last release (written atomically, not fsynced:
        the charge is already durable (:meth:`begin`), and a cache lost in a crash only
        turns a later identical request into a refused one, never into fresh noise)."""
        entry = {"round": int(server_round), "digest": digest, "reply": reply}
        data = pickle.dumps(entry, pickle.HIGHEST_PROTOCOL)
        atomic_write(self._reply_path(sequence), data, durable=False)

    def cached(self, sequence: str, server_round: int, digest: str) -> Any:
        """The cached reply of this exact request, or None (only this party's own file; an
        unreadable one, e.g. cut short by a crash, is no cache)."""
        path = self._reply_path(sequence)
        if not path.exists():
            return None
        try:
            with path.open("rb") as fh:
                entry = pickle.load(fh)
        except (EOFError, pickle.UnpicklingError, OSError):
            return None
        if entry["round"] != int(server_round) or entry["digest"] != digest:
            return None
        return entry["reply"]


def read_ledger(path: str | Path) -> Ledger:
    """The ledger a ledger file holds (a journal, :mod:`fedpriv.privacy.journal`)."""
    return _ledger_of(read_journal(Path(path)))


def _ledger_of(state: JournalState) -> Ledger:
    """The :class:`Ledger` view of a journal's fold (a torn line counted, module docstring
    of :mod:`fedpriv.privacy.journal`)."""
    return Ledger(
        releases=state.total_releases(),
        spent=state.total_spent(),
        declined=state.declined,
        sequences={
            seq: {"count": count, "digests": list(state.digests.get(seq, []))}
            for seq, count in state.counts.items()
        },
        runs={key: dict(entry) for key, entry in state.runs.items()},
    )


def _within(total: float, budget: float) -> bool:
    return math.isinf(budget) or total <= budget + _REL_TOL * max(1.0, budget)
