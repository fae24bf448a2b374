"""Each noising party counts its own releases: a monotonic, persisted counter.

A client, a zone node or the server that adds privacy noise keeps its own ledger of what it
released, in a state directory it owns (never one named by a message), and decides itself
whether a request may produce a new release:

* **Where.** :func:`state_dir`: the node's own ``client-state-dir`` (its ``node_config``,
  else its ``run_config``, read by ``clients.releases.node_counter``); else
  ``<output-dir>/client-state`` when its ``run_config`` names an ``output-dir`` (a
  simulation started with one: a resumed run finds the ledgers again);
  else ``$FEDPRIV_STATE_ROOT`` (default ``<tempdir>/fedpriv-state-<uid>``) ``/run-<run_id>``:
  one directory per run, keyed by the run id the node's runtime gives it. One file per
  party and identity in it, ``<party>-<identity>.json`` (identity: the node's own
  ``partition-id``, a zone node's zone id). A ledger kept in a named directory composes
  every release of the node's data through it, across runs and restarts; the per-run
  default lives for one run (a restarted run, a new run id, starts a new one).
* **What.** The ledger holds the node's total ``releases`` (monotonic), the ``spent`` cost
  (for budgets in the party's own unit: GP leakage, one per DP-SGD participation, ...),
  ``declined`` requests, and per *sequence* the last released round, its request digest and
  the count of that sequence. A sequence is what the party releases under one mechanism in one
  run: ``(run id, the party's own mechanism settings)``, chosen by the caller from the node's
  own values; the server's round, ledger tag or path never selects it.
* **Repeats.** :meth:`ReleaseCounter.begin` answers a request with a :class:`Ticket`:
  ``repeat`` — the same round and request as the sequence's last release: the caller replies
  with the cached reply (:meth:`ReleaseCounter.cached`, the same arrays bit for bit), no fresh
  noise; ``fresh`` — a new release, already charged and persisted (charge BEFORE release:
  the file is written atomically, temporary file + ``os.replace``, before the caller computes
  anything, so a crash never loses a charge); ``refused`` / ``declined`` — nothing is
  released. Under ``rewind = "refuse"`` (a zone node) a request for a round at or before the
  sequence's last release that is not the identical repeat is refused, so a rewound or
  replayed round never gets fresh noise; under ``rewind = "charge"`` (DP-SGD, IFCA: their ε
  or leakage is computed from the node's own count) it is a new release and is charged.
  ``max_releases`` caps a sequence (a zone node: its own ``num-server-rounds``), ``budget``
  caps ``spent`` (IFCA: its own ``leakage-budget``).

This module imports no Flower: the Flower adapters (records, contexts) are in
:mod:`clients.releases`.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

__all__ = [
    "STATE_DIR_KEY",
    "STATE_ROOT_ENV",
    "Ledger",
    "ReleaseCounter",
    "Ticket",
    "state_dir",
]

STATE_DIR_KEY = "client-state-dir"  # a node's own config: where it keeps its ledgers
STATE_ROOT_ENV = "FEDPRIV_STATE_ROOT"  # the default root of per-run state directories
CLIENT_STATE_DIR = "client-state"  # under a run config's own output-dir
Rewind = Literal["refuse", "charge"]
_REL_TOL = 1e-9  # float sums of costs against a budget


def default_root() -> Path:
    """``$FEDPRIV_STATE_ROOT``, else ``<tempdir>/fedpriv-state-<uid>``."""
    root = os.environ.get(STATE_ROOT_ENV, "")
    if root:
        return Path(root)
    return Path(tempfile.gettempdir()) / f"fedpriv-state-{os.getuid()}"


def state_dir(own_dir: str, output_dir: str, run_id: int) -> Path:
    """The node's own state directory: ``own_dir`` (its own ``client-state-dir``), else
    ``<output_dir>/client-state``, else ``default_root()/run-<run_id>`` (never a message's
    value). ``""`` and ``"auto"`` name no directory. The node resolves ``own_dir`` and
    ``output_dir`` from its own config (``clients.releases.node_counter``)."""
    if _names_a_folder(own_dir):
        return Path(own_dir)
    if _names_a_folder(output_dir):
        return Path(output_dir) / CLIENT_STATE_DIR
    return default_root() / f"run-{int(run_id)}"


def _names_a_folder(value: str | None) -> bool:
    return bool(value) and value != "auto"


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


@dataclass
class Ledger:
    """A party's own release ledger (see the module docstring)."""

    releases: int = 0
    spent: float = 0.0
    declined: int = 0
    sequences: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "releases": self.releases,
            "spent": self.spent,
            "declined": self.declined,
            "sequences": self.sequences,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ledger:
        return cls(
            releases=int(data["releases"]),
            spent=float(data["spent"]),
            declined=int(data["declined"]),
            sequences={str(k): dict(v) for k, v in data["sequences"].items()},
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
        if not self.path.exists():
            return Ledger()
        return Ledger.from_json(json.loads(self.path.read_text()))

    def _save(self, ledger: Ledger) -> None:
        atomic_write(self.path, json.dumps(ledger.to_json(), sort_keys=True).encode())

    def begin(
        self,
        sequence: str,
        server_round: int,
        digest: str,
        *,
        cost: float = 1.0,
        budget: Optional[float] = None,
        max_releases: Optional[int] = None,
        rewind: Rewind = "refuse",
    ) -> Ticket:
        """Decide one request (module docstring); a ``fresh`` ticket is charged and
        persisted before this returns. ``server_round`` and ``digest`` (of the request's
        content) only detect repeats and rewinds; they never reset the count."""
        if rewind not in ("refuse", "charge"):
            raise ValueError(f"rewind = {rewind!r} is not allowed; expected 'refuse' or 'charge'")
        ledger = self.load()
        last = ledger.sequences.get(sequence)
        if last is not None and int(server_round) <= int(last["round"]):
            same = int(server_round) == int(last["round"]) and last["digest"] == digest
            if same and self.cached(sequence, server_round, digest) is not None:
                return Ticket("repeat", ledger.releases, ledger.spent)
            if rewind == "refuse":
                why = (
                    f"round {int(server_round)} is not after round {int(last['round'])}, "
                    "which this node already released"
                )
                return Ticket("refused", ledger.releases, ledger.spent, why)
        count = 0 if last is None else int(last["count"])
        if max_releases is not None and count >= int(max_releases):
            why = f"this node's own limit of {int(max_releases)} releases is reached"
            return Ticket("refused", ledger.releases, ledger.spent, why)
        if budget is not None and not _within(ledger.spent + float(cost), float(budget)):
            ledger.declined += 1
            self._save(ledger)
            why = f"budget {float(budget):g} would be exceeded (spent {ledger.spent:g})"
            return Ticket("declined", ledger.releases, ledger.spent, why)
        ledger.releases += 1
        ledger.spent += float(cost)
        ledger.sequences[sequence] = {
            "round": int(server_round),
            "digest": digest,
            "count": count + 1,
        }
        self._save(ledger)  # charged before anything is released
        return Ticket("fresh", ledger.releases, ledger.spent)

    def _reply_path(self, sequence: str) -> Path:
        return self.directory / f"{self.party}-{self.identity}.{sequence}.reply.pkl"

    def remember(self, sequence: str, server_round: int, digest: str, reply: Any) -> None:
        """Cache the reply of the sequence's last release (written atomically)."""
        entry = {"round": int(server_round), "digest": digest, "reply": reply}
        atomic_write(self._reply_path(sequence), pickle.dumps(entry, pickle.HIGHEST_PROTOCOL))

    def cached(self, sequence: str, server_round: int, digest: str) -> Any:
        """The cached reply of this exact request, or None (only this party's own file)."""
        path = self._reply_path(sequence)
        if not path.exists():
            return None
        with path.open("rb") as fh:
            entry = pickle.load(fh)
        if entry["round"] != int(server_round) or entry["digest"] != digest:
            return None
        return entry["reply"]


def _within(total: float, budget: float) -> bool:
    return math.isinf(budget) or total <= budget + _REL_TOL * max(1.0, budget)
