"""This run's ε beside the lifetime ε of every party of a persistent federation.

A persistent federation (``federation-dir``) keeps each party's ledger
(:mod:`fedpriv.privacy.ledger.store`) across runs. Before a run, :func:`ledger_marks` notes
the last row of every ledger database under the state root; after it, :func:`party_figures`
splits each party's rows at that mark: the rows up to it are its ``earlier_releases``, the
rest ``this_run_releases``, and

    this_run_epsilon = ε(compose(events of this run's rows); δ)
    lifetime_epsilon = ε(compose(events of all its rows); δ)

(:func:`fedpriv.privacy.ledger.events.compose_epsilon`, add-or-remove-one: the nodes' own
relation). A party whose rows hold no ``DpEvent`` (IFCA's leakage, a zone node's μ²) gets
the counts only. Read-only: nothing here writes a ledger.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedpriv.privacy.ledger.events import NOT_A_DP_EVENT, compose_epsilon, event_from_json
from fedpriv.privacy.ledger.store import BUSY_TIMEOUT_MS, DB_NAME

__all__ = ["ledger_marks", "party_figures"]


def _databases(root: Path) -> Iterator[Path]:
    for db in [root / DB_NAME, *sorted(root.glob(f"node-*/{DB_NAME}"))]:
        if db.is_file():
            yield db


def _read(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
    try:
        return list(conn.execute(sql, args).fetchall())
    except sqlite3.OperationalError:  # no table yet
        return []
    finally:
        conn.close()


def ledger_marks(root: str | Path) -> dict[str, int]:
    """database path -> the id of its last release row now (0: none)."""
    out = {}
    for db in _databases(Path(root)):
        rows = _read(db, "SELECT max(id) FROM releases")
        out[str(db)] = int(rows[0][0] or 0) if rows else 0
    return out


def party_figures(root: str | Path, marks: dict[str, int], delta: float) -> dict[str, Any]:
    """``<folder>/<party>/<identity>`` -> its releases before and in this run and (with
    ``DpEvent`` rows) this run's and the lifetime ε at ``delta`` (module docstring)."""
    out: dict[str, Any] = {}
    for db in _databases(Path(root)):
        mark = marks.get(str(db), 0)
        rows = _read(db, "SELECT party, identity, id, event FROM releases ORDER BY id")
        parties: dict[tuple[str, int], list[tuple[int, str]]] = {}
        for party, identity, row_id, event in rows:
            parties.setdefault((str(party), int(identity)), []).append((int(row_id), event))
        for (party, identity), items in sorted(parties.items()):
            name = f"{db.parent.name}/{party}/{identity}"
            out[name] = _figures(items, mark, delta)
    return out


def _figures(items: list[tuple[int, str]], mark: int, delta: float) -> dict[str, Any]:
    earlier = [e for i, e in items if i <= mark]
    mine = [e for i, e in items if i > mark]
    figures: dict[str, Any] = {"earlier_releases": len(earlier), "this_run_releases": len(mine)}
    if any(e != NOT_A_DP_EVENT for _, e in items):
        figures["this_run_epsilon"] = _epsilon(mine, delta)
        figures["lifetime_epsilon"] = _epsilon(earlier + mine, delta)
        figures["delta"] = delta
    return figures


def _epsilon(events: list[str], delta: float) -> float | str:
    """ε of the events' composition (``"inf"`` for a release without noise, for JSON)."""
    eps = compose_epsilon((event_from_json(e) for e in events if e != NOT_A_DP_EVENT), delta)
    return eps if math.isfinite(eps) else "inf"
