"""The one multi-run runner: many cells (runs) inside ONE started simulation.

Used by ``fedpriv grid`` (strategies × privacy × seeds), ``fedpriv attack cia`` (the CIA
grid), ``fedpriv audit --grid`` (mechanism rows × z), the IFCA sweep (``ifca-sweep``) and the
zonal comparison (``hdp-digits``). A cell is one resolved run config with its own
``output-dir``; all cells of a simulation share its SuperNodes (same ``num-clients``), so N
cells pay one Ray/TF start-up, not N.

:func:`run_cells` is the loop: complete cells are skipped (resume), each remaining cell runs
with its failure isolated (an exception fails that cell, the next one runs), and one progress
line per cell gives the elapsed time and an ETA (mean time per cell run so far × cells left).
The report step is the caller's, once, after the loop.

``fedpriv grid``, ``fedpriv attack cia`` and ``fedpriv audit --grid`` write the cells to a plan file
(:func:`write_plan`) and start one simulation with ``run-plan = <path>``; the ServerApp
then runs :func:`run_plan`: every cell with its kind's runner, ``<plan dir>/cells.json``
recording each cell's status and wall time.

Side by side (``fedpriv grid --parallel N``): :func:`launch_plan` deals the cells
round-robin into ``N`` lanes, each its own plan (``<dir>/lanes/<k>/plan.json``), simulation
process, log and ``cells.json``, all started at once and sharing the Ray cluster when the
federation attaches to one (:mod:`fedpriv.scenarios.cli.ray_cluster`). Each cell keeps its own
config
(seed included), so its results are those of the same cell run serially; a lane whose process
dies (OOM, a kill) loses only its own unfinished cells, which stay incomplete (the next run
resumes them). Every cell's ``summary.json`` records the Ray nodes that ran its clients
(``ray_nodes``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpriv.scenarios.cli import launch, ray_cluster
from fedpriv.scenarios.config.feature import Catalog
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.config.specs import ServerRun, server_run

MANIFEST = "cells.json"
PLAN_NAME = "plan.json"
LOG_NAME = "run.log"
LANES_DIR = "lanes"


@dataclass(frozen=True)
class Cell:
    """One run of a multi-run: a label and its resolved config."""

    label: str
    cfg: Mapping[str, Any]


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def run_cells(
    cells: Sequence[Cell],
    run_one: Callable[[Cell], Any],
    *,
    is_complete: Callable[[Cell], bool],
    log: Callable[[str], None] = lambda line: print(line, flush=True),
    prefix: str = "fedpriv",
) -> list[dict[str, Any]]:
    """Run every cell that is not complete; one row per cell (status, wall time, result).

    ``is_complete`` is asked once per cell, before any cell runs (it may re-log a complete
    cell's rounds into a combined log, so it must not be asked twice).
    """
    complete = [is_complete(c) for c in cells]
    todo = complete.count(False)
    rows: list[dict[str, Any]] = []
    done_walls: list[float] = []
    for index, (cell, done) in enumerate(zip(cells, complete), 1):
        head = f"{prefix}: [{index}/{len(cells)}] {cell.label}"
        if done:
            log(f"{head}: complete, skipped")
            rows.append({"label": cell.label, "status": "skipped", "result": None})
            continue
        log(f"{head}: running ...")
        t0 = time.time()
        try:
            result, status = run_one(cell), "ok"
        except Exception as err:  # noqa: BLE001  (one cell's failure must not stop the rest)
            result, status = None, "failed"
            log(f"{head}: FAILED: {type(err).__name__}: {err}")
        wall = time.time() - t0
        done_walls.append(wall)
        left = todo - len(done_walls)
        eta = f", ETA {_minutes(left * sum(done_walls) / len(done_walls))}" if left else ""
        log(f"{head}: {status} ({_minutes(wall)}; {left} to run{eta})")
        rows.append({"label": cell.label, "status": status, "wall_seconds": wall, "result": result})
    return rows


# --- plans: many cells in one simulation (fedpriv grid, fedpriv attack cia) -----------------


def write_plan(path: str | Path, cells: Sequence[Cell]) -> Path:
    """Write the cells (label + resolved config) a ``run-plan`` simulation will run."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"cells": [{"label": c.label, "config": dict(c.cfg)} for c in cells]}
    path.write_text(json.dumps(doc, indent=2, sort_keys=True))
    return path


def read_plan(path: str | Path, catalog: Catalog) -> list[Cell]:
    """The plan's cells, every config resolved and checked again (one-line ConfigError)."""
    try:
        doc = json.loads(Path(path).read_text())
        items = doc["cells"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError("run-plan", str(path), "a plan file written by fedpriv") from err
    return [Cell(item["label"], catalog.resolve_run_config(item["config"])) for item in items]


def result_or_summary(row: Mapping[str, Any], cell: Cell) -> dict[str, Any]:
    """A cell's summary: what its run returned, or (skipped) its summary.json."""
    if row["result"] is not None:
        return row["result"]
    path = Path(cell.cfg["output-dir"]) / "summary.json"
    if not path.exists():
        raise RuntimeError(f"run {cell.label} failed (see the log above)")
    return json.loads(path.read_text())


def summary_complete(cell: Cell) -> bool:
    """A cell is complete when its summary.json exists (written last, atomically)."""
    return (Path(cell.cfg["output-dir"]) / "summary.json").is_file()


def check_one_node_per_client(cells: Sequence[Cell]) -> None:
    """A plan's cells share one simulation of ``num-clients`` SuperNodes, so a zonal cell must
    run with one SuperNode per client (``zonal-runtime = in-server``); zone nodes need a
    federation of ``num-zones`` SuperNodes of their own (a single ``fedpriv run``)."""
    from fedpriv.scenarios.zonal.keys import zone_nodes

    for cell in cells:
        if zone_nodes(cell.cfg):
            raise ConfigError(
                "zonal-runtime",
                cell.cfg.get("zonal-runtime"),
                f"'in-server' for cell {cell.label} of a multi-run plan (zone nodes need a "
                "simulation of num-zones SuperNodes: run it with fedpriv run)",
            )


def run_plan(grid: Any, run: ServerRun, catalog: Catalog) -> None:
    """ServerApp side of ``run-plan``: every cell of the plan with its kind's runner (each
    cell's spec built once, from its resolved config, when it runs)."""
    plan = run.spec.run_plan
    cells = read_plan(plan, catalog)
    check_one_node_per_client(cells)
    sizes = {int(c.cfg["num-clients"]) for c in cells}
    if sizes != {run.spec.participation.population}:
        raise ConfigError("run-plan", plan, "cells with num-clients of the simulation")

    def run_one(cell: Cell) -> dict[str, Any]:
        from fedpriv.scenarios.config.manifest import write_manifest

        write_manifest(cell.cfg["output-dir"], cell.cfg)  # what a single run records too
        run = server_run(cell.cfg, catalog.kind(cell.cfg))  # the cell's spec: built once
        catalog.runners[run.spec.kind](grid, run, catalog)
        nodes = ray_cluster.placement()  # the Ray nodes of this simulation's client actors
        ray_cluster.record_placement(cell.cfg["output-dir"], nodes)
        return {ray_cluster.PLACEMENT_KEY: nodes}

    def complete(cell: Cell) -> bool:
        check = catalog.completion(catalog.kind(cell.cfg))
        return check(cell.cfg) if check is not None else summary_complete(cell)

    rows = run_cells(cells, run_one, is_complete=complete)
    manifest = Path(plan).parent / MANIFEST
    kept = [{**r, "result": None, **(r["result"] or {})} for r in rows]
    manifest.write_text(json.dumps({"cells": kept}, indent=2))


def split_lanes(cells: Sequence[Cell], parallel: int) -> list[list[Cell]]:
    """The cells dealt round-robin into ``min(parallel, len(cells))`` lanes (at least one)."""
    count = max(1, min(int(parallel), len(cells)))
    return [list(cells[k::count]) for k in range(count)]


def launch_plan(
    output_dir: Path,
    cells: Sequence[Cell],
    top: Mapping[str, Any],
    federation: str | ray_cluster.Federation,
    catalog: Catalog,
    parallel: int = 1,
) -> int:
    """Run ``cells`` in ONE simulation (``run-plan``) from the command line, or, with
    ``parallel`` > 1, in that many simulations side by side (module docstring).

    ``top`` are the overrides of the simulation's own config (scenario, num-clients, ...);
    the output goes to ``output_dir/run.log`` (each lane's to ``lanes/<k>/run.log``;
    progress lines are also printed). Returns 0, or the worst exit status of a simulation
    (2: it could not start, e.g. no GPU for a GPU federation).
    """
    check_one_node_per_client(cells)
    lanes = split_lanes(cells, parallel)
    if len(lanes) == 1:
        return _launch_lane(Path(output_dir), cells, top, federation, catalog, 1)
    from concurrent.futures import ThreadPoolExecutor

    root = Path(output_dir) / LANES_DIR
    with ThreadPoolExecutor(len(lanes)) as pool:
        futures = [
            pool.submit(_launch_lane, root / str(k), lane, top, federation, catalog, len(lanes))
            for k, lane in enumerate(lanes)
        ]
        codes = [f.result() for f in futures]
    return 2 if 2 in codes else next((c for c in codes if c), 0)


def _launch_lane(
    lane_dir: Path,
    cells: Sequence[Cell],
    top: Mapping[str, Any],
    federation: str | ray_cluster.Federation,
    catalog: Catalog,
    share: int,
) -> int:
    """One simulation running ``cells`` (a plan in ``lane_dir``), one of ``share`` that
    share the Ray cluster."""
    path = write_plan(lane_dir / PLAN_NAME, cells)
    overrides = {**top, "run-plan": str(path), "output-dir": str(lane_dir)}
    cfg = catalog.resolve_run_config(launch.app_config(overrides))
    return launch.simulate(
        cfg,
        [launch.run_config_text(overrides)],
        federation,
        log_path=lane_dir / LOG_NAME,
        share=share,
    )
