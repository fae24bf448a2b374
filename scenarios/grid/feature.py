"""Feature ``grid``: ``fedpriv grid`` (strategies × privacy × seeds) and ``fedpriv report``.

``fedpriv grid --scenario S --strategies A,B --privacy none,global-dp --seeds 0,1
--output-dir D [--run-config "k=v ..."]`` runs every cell into ``D/<strategy>/<privacy>/seed<k>``
inside ONE Flower simulation (:mod:`fedpriv.scenarios.app.multirun`: the cells are written to
``D/plan.json`` and one simulation, :mod:`fedpriv.scenarios.cli.simulation_runner`, runs them with
``run-plan``), so N cells pay one start-up. Everything is validated before anything runs
(unknown strategy or privacy mode, bad seed, bad override: one line, exit 2). Complete cells
(summary.json present) are skipped; a failed cell does not stop the others; failures are
listed at the end and the exit status is 1.
The simulation's output goes to ``D/run.log`` (progress lines with an ETA are also printed);
``D/grid.json`` records every cell's status and wall time.

``--parallel N`` runs the cells in ``N`` simulations side by side
(:func:`fedpriv.scenarios.app.multirun.
launch_plan`: lanes, each with its own plan and log under ``D/lanes/<k>``); the default
(``auto``) is :func:`fedpriv.scenarios.cli.ray_cluster.default_parallel` of this machine's CPUs and
GPU
memory (1 on 2 CPUs). ``--ray-address`` (or the federation's ``ray-address``) runs them on an
existing Ray cluster; ``grid.json`` and each cell's summary record its Ray nodes.

``fedpriv report D`` writes ``D/report.md`` and its plots (``fedpriv.reporting.report``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from fedpriv.scenarios.app import multirun
from fedpriv.scenarios.cli import launch as cli
from fedpriv.scenarios.cli import ray_cluster
from fedpriv.scenarios.config.feature import Catalog, Command, Feature
from fedpriv.scenarios.config.schema import ConfigError
from fedpriv.scenarios.grid.keys import KEYS

from fedpriv.grid import (
    Cell,
    GridError,
    check_choices,
    enumerate_cells,
    is_complete,
    parse_list,
    parse_seeds,
)
from fedpriv.names import STRATEGIES

RESERVED = ("scenario", "strategy", "privacy", "seed", "output-dir")
LOG_NAME = multirun.LOG_NAME


def cell_overrides(scenario: str, cell: Cell, extra: dict[str, Any]) -> dict[str, Any]:
    """The run-config overrides of one cell."""
    return {
        **extra,
        "scenario": scenario,
        "strategy": cell.strategy,
        "privacy": cell.privacy,
        "seed": cell.seed,
        "output-dir": str(cell.path),
    }


def cell_run_config(overrides: dict[str, Any]) -> str:
    """The one --run-config string of a cell (each key once: flwr refuses duplicates)."""
    try:
        return cli.run_config_text(overrides)
    except ConfigError as err:
        message = f"{err.key} = {err.value!r}: values with a single quote are not supported"
        raise GridError(message) from err


def plan(
    args: argparse.Namespace, catalog: Catalog
) -> tuple[list[Cell], dict[str, Any], list[dict[str, Any]]]:
    """Parse and check everything; raise GridError / ConfigError / DataError.

    Returns the cells, the extra overrides and each cell's resolved config.
    """
    catalog.scenario(args.scenario)
    strategies = parse_list(args.strategies, name="strategies")
    check_choices(strategies, STRATEGIES, name="strategies")
    privacy = parse_list(args.privacy, name="privacy")
    check_choices(privacy, tuple(catalog.privacy_modes), name="privacy")
    seeds = parse_seeds(args.seeds)
    extra = cli.parse_overrides(args.run_config)
    reserved = [k for k in extra if k in RESERVED]
    if reserved:
        raise GridError(
            f"--run-config sets {', '.join(reserved)}; the grid sets these "
            "(use --scenario/--strategies/--privacy/--seeds/--output-dir)"
        )
    cells = enumerate_cells(
        strategies=strategies, privacy=privacy, seeds=seeds, output_dir=args.output_dir
    )
    configs = []
    for cell in cells:
        overrides = cell_overrides(args.scenario, cell, extra)
        cell_run_config(overrides)
        configs.append(catalog.resolve_run_config(cli.app_config(overrides)))
    from fedpriv.clients.partitions import federated_data

    for seed in seeds:  # open the data once per seed (partitions depend on it)
        cli.preflight(
            cli.app_config(cell_overrides(args.scenario, cells[0], extra) | {"seed": seed}),
            catalog,
        )
        federated_data.cache_clear()  # the simulation loads it in its own processes
    return cells, extra, configs


def _write_manifest(output_dir: Path, rows: list[dict]) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    tmp = output_dir / "grid.json.tmp"
    tmp.write_text(json.dumps({"cells": rows}, indent=2))
    tmp.replace(output_dir / "grid.json")


def _grid_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", required=True, help="a registered scenario")
    parser.add_argument("--strategies", required=True, help="comma-separated, e.g. fedavg,fedopt")
    parser.add_argument(
        "--privacy",
        required=True,
        help="comma-separated privacy modes, e.g. none,global-dp,metric-dp",
    )
    parser.add_argument("--seeds", required=True, help="comma-separated integers, e.g. 0,1")
    parser.add_argument("--output-dir", required=True, help="grid directory D")
    cli.add_run_config_option(parser, "extra Flower-style overrides for every cell")
    cli.add_federation_option(parser)
    parser.add_argument(
        "--parallel",
        default="auto",
        help="cells run side by side, each in its own simulation: a positive integer or auto "
        "(from the CPUs and GPU memory here; 1 on 2 CPUs)",
    )
    parser.add_argument("--report", action="store_true", help="write D/report.md at the end")
    parser.add_argument("--dry-run", action="store_true", help="list the cells and stop")


def parallel_cells(value: str, federation: ray_cluster.Federation) -> int:
    """``--parallel``: a positive integer, or ``auto`` (:func:`ray_cluster.default_parallel`
    of this machine); GridError otherwise."""
    from fedpriv.scenarios.speed.workers import available_cpus

    if value == "auto":
        backend = cli.federation_settings(federation).get("backend", {})
        uses_gpu = ray_cluster.gpus_per_client(backend) > 0
        gib = ray_cluster.gpu_memory_gib() if uses_gpu else None
        return ray_cluster.default_parallel(available_cpus(), gib, uses_gpu)
    if not value.isdigit() or int(value) < 1:
        raise GridError(
            f"--parallel = {value!r} is not allowed; expected a positive integer or auto"
        )
    return int(value)


def _grid(args: argparse.Namespace, catalog: Catalog) -> int:
    from fedpriv.data import DataError

    federation = ray_cluster.federation_of(args)
    try:
        cells, extra, configs = plan(args, catalog)
        parallel = parallel_cells(args.parallel, federation)
    except (GridError, ConfigError, DataError) as err:
        print(f"fedpriv grid: {err}", file=sys.stderr)
        return 2
    output_dir = Path(args.output_dir)
    todo = [c for c in cells if not is_complete(c.path)]
    lanes = max(1, min(parallel, len(todo)))
    where = "one simulation" if lanes == 1 else f"{lanes} simulations side by side"
    print(
        f"fedpriv grid: {len(cells)} cells, {len(cells) - len(todo)} complete, "
        f"{len(todo)} to run in {where} -> {output_dir}",
        flush=True,
    )
    if args.dry_run:
        for cell in cells:
            print(f"  {cell.label}: {'complete' if is_complete(cell.path) else 'pending'}")
        return 0
    t_grid = time.time()
    for cell in cells:
        if is_complete(cell.path):
            print(f"fedpriv grid: {cell.label}: complete, skipped", flush=True)
    if todo:
        runs = [multirun.Cell(c.label, cfg) for c, cfg in zip(cells, configs) if c in todo]
        top = {**extra, "scenario": args.scenario, "num-clients": configs[0]["num-clients"]}
        rc = multirun.launch_plan(output_dir, runs, top, federation, catalog, parallel=lanes)
        if rc == 2:  # the simulation could not start (its one line is above): nothing ran
            return 2
        if rc:
            print(f"fedpriv grid: the simulation exited with {rc}", file=sys.stderr)
    rows = []
    for cell in cells:
        status = "skipped" if cell not in todo else ("ok" if is_complete(cell.path) else "failed")
        rows.append({"strategy": cell.strategy, "privacy": cell.privacy, "seed": cell.seed,
                     "path": str(cell.path), "status": status,
                     ray_cluster.PLACEMENT_KEY: _ray_nodes(cell.path)})  # fmt: skip
    _write_manifest(output_dir, rows)
    failed = [c for c, r in zip(cells, rows) if r["status"] == "failed"]
    print(
        f"fedpriv grid: done in {time.time() - t_grid:.0f} s; "
        f"{sum(r['status'] == 'ok' for r in rows)} ran, "
        f"{sum(r['status'] == 'skipped' for r in rows)} skipped, {len(failed)} failed",
        flush=True,
    )
    for cell in failed:
        print(f"fedpriv grid: FAILED {cell.label} (see {output_dir / LOG_NAME})", file=sys.stderr)
    _print_cells(cells)
    if args.report:
        from fedpriv.reporting.report import write_report

        print(f"fedpriv grid: report -> {write_report(output_dir)}", flush=True)
    return 1 if failed else 0


def _print_cells(cells: list) -> None:
    """Each finished cell in one line: final metrics and privacy statement (the summary
    ``fedpriv run`` ends with, :func:`fedpriv.reporting.console.cell_line`)."""
    from fedpriv.reporting.console import cell_line

    for cell in cells:
        path = Path(cell.path) / "summary.json"
        if path.is_file():
            print(f"fedpriv grid:   {cell.label}: {cell_line(json.loads(path.read_text()))}")


def _ray_nodes(path: Path) -> list[dict[str, Any]] | None:
    """The Ray nodes a complete cell's summary records (None when it has none)."""
    summary = Path(path) / "summary.json"
    if not summary.is_file():
        return None
    return json.loads(summary.read_text()).get(ray_cluster.PLACEMENT_KEY)


def _report_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output_dir", help="a grid directory (<strategy>/<privacy>/seed<k>)")
    parser.add_argument("--last-k", type=int, default=5, help="rounds in the last-k table")


def _report(args: argparse.Namespace, catalog: Catalog) -> int:
    from fedpriv.reporting.report import write_report

    del catalog
    root = Path(args.output_dir)
    if not root.is_dir():
        print(f"fedpriv report: {root} is not a directory", file=sys.stderr)
        return 2
    if args.last_k < 1:
        print(f"fedpriv report: --last-k = {args.last_k} must be >= 1", file=sys.stderr)
        return 2
    path = write_report(root, last_k=args.last_k)
    print(f"fedpriv report: wrote {path}")
    return 0


FEATURE = Feature(
    name="grid",
    description="Grids of runs (strategies x privacy x seeds) and the MP-shaped report.",
    keys=KEYS,
    commands=(
        Command(
            "grid",
            _grid_args,
            _grid,
            "Train every combination of strategies, privacy modes and seeds, and compare them.",
            "fedpriv grid --scenario digits --strategies fedavg,fedprox "
            "--privacy none,global-dp --seeds 0,1 --output-dir runs/grid --report",
        ),
        Command(
            "report",
            _report_args,
            _report,
            "Write the comparison report (report.md) of a folder made by fedpriv grid.",
            "fedpriv report runs/grid",
        ),
    ),
)
