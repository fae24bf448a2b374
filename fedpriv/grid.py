"""Experiment grids (MP §7, SPEC §5): cells, completion, result collection. No Flower.

A grid is strategies × privacy modes × seeds on one scenario (MP: 6 strategies ×
{vanilla, global-DP, metric-DP} × seeds). Each cell is one run written to

    <output-dir>/<strategy>/<privacy>/seed<k>/

A cell is complete when its ``summary.json`` exists (``fedpriv.reporting.runlog`` writes it
atomically as the last step of a run), so an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.privacy.modes.registry import selected
from fedpriv.reporting.records import RoundRecord, read_round_records
from fedpriv.reporting.runlog import from_json_number

SUMMARY = "summary.json"
ROUNDS = "rounds.jsonl"
PREDICTIONS = "test_predictions.npz"
_SEED_DIR = re.compile(r"^seed(\d+)$")


class GridError(ValueError):
    """A grid specification is not allowed (one-line message)."""


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    strategy: str
    privacy: str
    seed: int
    path: Path

    @property
    def label(self) -> str:
        return f"{self.strategy}/{self.privacy}/seed{self.seed}"


def cell_dir(output_dir: str | Path, strategy: str, privacy: str, seed: int) -> Path:
    """``<output-dir>/<strategy>/<privacy>/seed<k>``."""
    return Path(output_dir) / strategy / privacy / f"seed{int(seed)}"


def parse_list(text: str, *, name: str) -> list[str]:
    """A comma-separated list: items stripped, no empty items, no duplicates."""
    if not isinstance(text, str):
        raise GridError(f"{name} = {text!r}: expected a comma-separated list")
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise GridError(f"{name} = {text!r}: expected a comma-separated list without empty items")
    duplicates = sorted({item for item in items if items.count(item) > 1})
    if duplicates:
        raise GridError(f"{name} = {text!r}: duplicate items {', '.join(duplicates)}")
    return items


def parse_seeds(text: str) -> list[int]:
    """A comma-separated list of distinct integers in [0, 2^31 - 1]."""
    seeds = []
    for item in parse_list(text, name="seeds"):
        if not re.fullmatch(r"\d+", item) or int(item) > 2**31 - 1:
            raise GridError(f"seeds = {text!r}: {item!r} is not an integer in [0, 2^31-1]")
        seeds.append(int(item))
    return seeds


def check_choices(items: Sequence[str], allowed: Iterable[str], *, name: str) -> None:
    """Every item must be one of ``allowed`` (one-line GridError naming the first bad one)."""
    allowed = list(allowed)
    for item in items:
        if item not in allowed:
            raise GridError(
                f"{name}: {item!r} is not allowed; expected items of " + " | ".join(allowed)
            )


def enumerate_cells(
    *,
    strategies: Sequence[str],
    privacy: Sequence[str],
    seeds: Sequence[int],
    output_dir: str | Path,
) -> list[Cell]:
    """Cells in run order: strategy-major, then privacy mode, then seed."""
    if not strategies or not privacy or not seeds:
        raise GridError("strategies, privacy and seeds must each name at least one item")
    return [
        Cell(s, p, int(k), cell_dir(output_dir, s, p, k))
        for s in strategies
        for p in privacy
        for k in seeds
    ]


def is_complete(path: str | Path) -> bool:
    """A cell (run directory) is complete when its summary.json exists."""
    return (Path(path) / SUMMARY).is_file()


def pending(cells: Iterable[Cell]) -> list[Cell]:
    """The cells that are not complete yet."""
    return [cell for cell in cells if not is_complete(cell.path)]


# --- results ------------------------------------------------------------------------------


def _number(value: Any) -> float:
    """A JSON value as float ("inf"/"nan" strings of fedpriv.reporting.runlog included; else
    nan)."""
    number = from_json_number(value)
    return float("nan") if number is None else number


@dataclass
class RunResult:
    """What one complete run directory holds."""

    strategy: str
    privacy: str
    seed: int
    path: Path
    summary: dict
    rounds: list[RoundRecord] = field(default_factory=list)

    def series(self, source: str = "server", metric: str = "accuracy") -> list[float]:
        """Per-round ``metric`` of ``source`` (server | distributed), rounds 1..R."""
        return [r.metric(source, metric) for r in self.rounds if r.round > 0]

    def last_k_mean(self, k: int = 5, source: str = "server") -> float:
        """Mean accuracy of the last ``k`` rounds (MP Tables 4 and 6, one run)."""
        values = [v for v in self.series(source) if math.isfinite(v)][-k:]
        return float(np.mean(values)) if values else float("nan")

    def final(self, metric: str) -> float:
        """A final server test-set metric from summary.json (``final.<metric>``)."""
        return _number(self.summary.get("final", {}).get(metric))

    def predictions(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(y_true, proba) of the final model on the server test set, if saved."""
        path = self.path / PREDICTIONS
        if not path.is_file():
            return None
        with np.load(path) as npz:
            return np.asarray(npz["y_true"]), np.asarray(npz["proba"])


Groups = dict[tuple[str, str], list[RunResult]]  # (strategy, privacy) -> runs


def load_run(path: str | Path) -> RunResult | None:
    """One complete run directory (None when summary.json is missing or unreadable).

    Strategy, privacy and seed come from the summary's ``config`` when present, else from
    the ``<strategy>/<privacy>/seed<k>`` path.
    """
    path = Path(path)
    try:
        summary = json.loads((path / SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    recorded = summary.get("config", {}) if isinstance(summary, dict) else {}  # a record
    match = _SEED_DIR.match(path.name)
    seed = recorded.get("seed", summary.get("seed", int(match.group(1)) if match else 0))
    return RunResult(
        strategy=str(recorded.get("strategy", path.parent.parent.name)),
        privacy=str(selected(recorded) or path.parent.name),
        seed=int(seed),
        path=path,
        summary=summary,
        rounds=read_round_records(path),
    )


def collect_results(output_dir: str | Path) -> list[RunResult]:
    """Every complete run under ``output_dir`` (layout ``<strategy>/<privacy>/seed<k>``)."""
    root = Path(output_dir)
    runs = []
    for summary in sorted(root.glob(f"*/*/seed*/{SUMMARY}")):
        if _SEED_DIR.match(summary.parent.name):
            run = load_run(summary.parent)
            if run is not None:
                runs.append(run)
    return runs
