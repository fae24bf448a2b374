"""The runs of ``fedpriv baseline``: targets, their seeded cells, and one simulation per group.

A target is a scenario (``digits``) or a grid cell of one (``digits/fedyogi/global-dp``:
scenario/strategy/privacy). Each target runs once per seed, as a cell of a multi-run plan
(:mod:`fedpriv.scenarios.app.multirun`): cells with the same number of SuperNodes share ONE
simulation;
a zonal run with zone nodes needs a federation of its own and runs alone.

Every cell's config is resolved and checked, and its data opened, before anything runs
(one-line :class:`~fedpriv.scenarios.config.schema.ConfigError` / ``DataError``). Baseline runs opt
in to
seeded noise and sampling (``reproducible-noise = true``, unless the user's run config says
otherwise): a baseline is a regression test, not a private release, and a rerun of a seed
then repeats its noise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.scenarios.app import multirun
from fedpriv.scenarios.cli import launch
from fedpriv.scenarios.config.feature import Catalog
from fedpriv.scenarios.config.schema import ConfigError

RESERVED = ("scenario", "strategy", "privacy", "seed", "output-dir", "run-plan")
TARGET_HELP = "SCENARIO or SCENARIO/STRATEGY/PRIVACY, e.g. digits or digits/fedavg/global-dp"


@dataclass(frozen=True, eq=False)
class BaselineCell:
    """One run: a target at one seed, its resolved config and its output folder."""

    target: str
    seed: int
    overrides: Mapping[str, Any]
    cfg: Mapping[str, Any]

    @property
    def label(self) -> str:
        return f"{self.target} seed {self.seed}"

    @property
    def path(self) -> Path:
        return Path(self.cfg["output-dir"])


def target_overrides(spec: str) -> dict[str, Any]:
    """``digits`` -> {scenario}; ``digits/fedavg/global-dp`` -> {scenario, strategy, privacy}."""
    parts = spec.split("/") if isinstance(spec, str) else []
    if len(parts) not in (1, 3) or not all(re.fullmatch(r"[\w.-]+", p) for p in parts):
        raise ConfigError("target", spec, TARGET_HELP)
    if len(parts) == 1:
        return {"scenario": parts[0]}
    return dict(zip(("scenario", "strategy", "privacy"), parts))


def check_common(overrides: Mapping[str, Any]) -> None:
    """``--run-config`` may not set what a target or the baseline sets itself."""
    for name in overrides:
        if name in RESERVED:
            raise ConfigError(
                f"--run-config {name}", overrides[name], "no value: targets and --seeds set it"
            )


def seeded(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` with ``reproducible-noise = true`` unless they set it (module docstring)."""
    return {"reproducible-noise": True, **overrides}


def plan_cells(
    targets: Mapping[str, Mapping[str, Any]],
    seeds: Sequence[int],
    common: Mapping[str, Any],
    work_dir: Path,
    catalog: Catalog,
) -> list[BaselineCell]:
    """Every (target, seed) resolved and checked, data opened; nothing runs yet.

    ``targets`` maps a target name to its overrides (:func:`target_overrides`); ``common``
    are the overrides of every run. Raises ConfigError / DataError (one line).
    """
    from fedpriv.clients.partitions import federated_data

    check_common(common)
    cells = []
    for target, overrides in targets.items():
        for seed in seeds:
            out = work_dir / target.replace("/", "-") / f"seed{seed}"
            run = {**seeded(common), **overrides, "seed": seed, "output-dir": str(out)}
            launch.run_config_text(run)  # a value with a single quote: one line
            cfg = launch.preflight(launch.app_config(run), catalog)
            cells.append(BaselineCell(target, seed, run, cfg))
        federated_data.cache_clear()  # the simulation opens the data in its own processes
    return cells


def _groups(cells: Sequence[BaselineCell]) -> list[list[BaselineCell]]:
    """Cells that can share one simulation (same num-clients, no zone nodes); zone-node
    runs alone."""
    shared: dict[int, list[BaselineCell]] = {}
    alone = []
    for cell in cells:
        if multirun_refused(cell.cfg):
            alone.append([cell])
        else:
            shared.setdefault(int(cell.cfg["num-clients"]), []).append(cell)
    return list(shared.values()) + alone


def run_cells(
    cells: Sequence[BaselineCell],
    common: Mapping[str, Any],
    work_dir: Path,
    federation: str,
    catalog: Catalog,
) -> dict[BaselineCell, bool]:
    """Run the cells (one simulation per group); cell -> whether it wrote its summary.json.

    The simulations' output goes to ``work_dir/simulation-<i>/run.log``; progress lines
    (one per cell, with an ETA) are printed."""
    for index, group in enumerate(_groups(cells)):
        log_dir = work_dir / f"simulation-{index}"
        first = group[0].cfg
        if multirun_refused(first):  # a group of its own (_groups)
            text = launch.run_config_text(group[0].overrides)
            launch.simulate(first, [text], federation, log_path=log_dir / multirun.LOG_NAME)
            continue
        plan = [multirun.Cell(c.label, c.cfg) for c in group]
        top = {**seeded(common), "scenario": first["scenario"], "num-clients": first["num-clients"]}
        multirun.launch_plan(log_dir, plan, top, federation, catalog)
    return {cell: (cell.path / "summary.json").is_file() for cell in cells}


def multirun_refused(cfg: Mapping[str, Any]) -> bool:
    """A zonal run with zone nodes cannot be a cell of a plan
    (:mod:`fedpriv.scenarios.app.multirun`)."""
    from fedpriv.scenarios.zonal.keys import zone_nodes

    return bool(zone_nodes(cfg))
