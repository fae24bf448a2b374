"""Privacy–utility grid: final accuracy against the target ε for the server-side DP modes.

``python -m bench.privacy_utility --out D`` runs every (method, ε, seed) cell of
:data:`METHODS` × ``--epsilons`` × ``--seeds`` on the cross-device digits setting
(:data:`BASE`: 100 clients) with the ``run-plan`` machinery of ``fedpriv grid``
(:func:`fedpriv.scenarios.app.multirun.launch_plan`): one simulation for every method but client
budgets, whose nodes own their budget and rounds and count their releases across the runs of a
simulation, so each of its cells runs in a simulation of its own, configured as the cell.
Each cell runs at its own noise multiplier: the smallest z whose ε
meets the target, found by the planner (:func:`fedpriv.privacy.accounting.target.
noise_for_target`, what ``fedpriv epsilon --target-epsilon`` prints), for the method's own
config or the one it names in :attr:`Method.z_from` (client budgets: fixed clipping's z, its
budget group set to the target ε; the no-amplification row at 20 per round: the all-clients
z). :mod:`bench.privacy_utility_page` writes the page and the plot.

Cells already complete (summary.json) are skipped, so a cut run resumes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedpriv.privacy.modes import (
    adaptive_clip,
    client_budgets,
    dp_ftrl,
    global_dp,
)
from fedpriv.privacy.modes import none as no_dp

BASE: dict[str, Any] = {
    "scenario": "digits",
    "model": "digits-mlp",
    "partition": "iid",
    "num-clients": 100,
    "clients-per-round": 20,
    "num-server-rounds": 20,
    "local-epochs": 5,
    "batch-size": 8,
    "optimizer": "sgd",
    "learning-rate": 0.05,
    "clipping-norm": 0.5,
    "strategy": "fedavg",
}


@dataclass(frozen=True)
class Method:
    """One row of the figure: a privacy mode with its own overrides and what its ε covers."""

    name: str
    mode: str
    covers: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    # the planner's config for z when it is not the run's own (mode, overrides)
    z_from: tuple[str, Mapping[str, Any]] | None = None


METHODS: tuple[Method, ...] = (
    Method(
        "fixed clipping (DP-FedAvg)",
        global_dp.MODE.name,
        "20 of 100 per round without replacement, amplified by sampling (replace-one)",
    ),
    Method(
        "adaptive clipping",
        adaptive_clip.MODE.name,
        "as fixed clipping; the noisy clipped counts (σ_b = 10) composed in",
        {"clipped-count-stddev": 10.0},
    ),
    Method(
        "DP-FTRL (tree)",
        dp_ftrl.MODE.name,
        "no amplification: any participation with each client at most once per restart (5 "
        "rounds); shuffled epochs, one tree each",
    ),
    Method(
        "client budgets",
        client_budgets.MODE.name,
        "each client's own Poisson rate q_i, amplified (add/remove); budget group = target ε; "
        "z = fixed clipping's at that ε",
        {"clients-per-round": 0},
        (global_dp.MODE.name, {"clients-per-round": 20}),
    ),
    Method(
        "DP-FedAvg, all clients",
        global_dp.MODE.name,
        "all 100 clients every round: no sampling, no amplification (replace-one)",
        {"clients-per-round": 0},
    ),
    Method(
        "DP-FedAvg, 20/round, no amplification",
        global_dp.MODE.name,
        "20 of 100 per round, ε counted as if every client were in every round (no "
        "amplification; replace-one): z of the all-clients row, σ = zC/20; the run's own "
        "summary reports the smaller amplified ε",
        {},
        (global_dp.MODE.name, {"clients-per-round": 0}),
    ),
)
NO_AMPLIFICATION = (METHODS[4].name, METHODS[5].name)  # DP-FTRL's comparators
NO_DP = Method("no DP", no_dp.MODE.name, "no privacy (reference)")


def slug(name: str) -> str:
    """A directory name for a method."""
    keep = [c if c.isalnum() else "-" for c in name.lower()]
    return "-".join(part for part in "".join(keep).split("-") if part)


def cell_dir(out: Path, method: Method, epsilon: float | None, seed: int) -> Path:
    """``out/<method>/eps<ε>/seed<k>`` (``eps-inf`` for the no-DP reference)."""
    tag = "eps-inf" if epsilon is None else f"eps{epsilon:g}"
    return out / slug(method.name) / tag / f"seed{seed}"


def _spec(cfg: Mapping[str, Any]) -> Any:
    from fedpriv.scenarios.config.features import CATALOG
    from fedpriv.scenarios.config.specs import server_run

    return server_run(cfg, CATALOG.kind(cfg)).spec


def _resolve(overrides: Mapping[str, Any]) -> dict[str, Any]:
    from fedpriv.scenarios.cli import launch
    from fedpriv.scenarios.config.features import CATALOG

    return CATALOG.resolve_run_config(launch.app_config(dict(overrides)))


def noise_for(method: Method, epsilon: float, rounds: int) -> float:
    """The planner's z for ``method`` at ``epsilon`` over ``rounds`` (client budgets: fixed
    clipping's z; its own rates q_i then meet the budget)."""
    from fedpriv.privacy.accounting.target import noise_for_target

    mode, overrides = method.z_from or (method.mode, method.overrides)
    values = {**BASE, "privacy": mode, **overrides, "num-server-rounds": rounds}
    return float(noise_for_target(_spec(_resolve(values)), epsilon)["noise_multiplier"])


def cell_overrides(
    method: Method, epsilon: float | None, seed: int, out: Path, rounds: int
) -> dict[str, Any]:
    """The run config of one cell (its z from the planner at the target ε)."""
    values = {**BASE, "privacy": method.mode, **method.overrides, "seed": seed}
    values["num-server-rounds"] = rounds
    values["output-dir"] = str(cell_dir(out, method, epsilon, seed))
    if epsilon is None:
        return values
    values["noise-multiplier"] = noise_for(method, epsilon, rounds)
    if method.mode == client_budgets.MODE.name:
        values["client-epsilon-groups"] = f"{epsilon:g}"
    return values


def simulation_top(method: Method, values: Mapping[str, Any]) -> dict[str, Any]:
    """The simulation's own config for a cell. Client budgets' nodes own their budget and the
    rounds (release keys: a message changing them is refused) and count their own releases
    across every run of the simulation (as a device would), so each of its cells runs in a
    simulation configured as the cell; the other methods share one."""
    top = {"scenario": BASE["scenario"], "num-clients": BASE["num-clients"]}
    if method.mode != client_budgets.MODE.name:
        return top
    return {**top, **{k: v for k, v in values.items() if k != "output-dir"}}


def run(
    out: Path,
    epsilons: Sequence[float],
    seeds: Sequence[int],
    rounds: int,
    federation: argparse.Namespace,
) -> int:
    """Every cell (complete cells skipped): one simulation, plus one per client-budgets ε."""
    from fedpriv.scenarios.app import multirun
    from fedpriv.scenarios.cli import ray_cluster
    from fedpriv.scenarios.config.features import CATALOG

    cells = [(NO_DP, None, s) for s in seeds]
    for batch in (epsilons[1::2], epsilons[0::2]):  # every other ε first: a cut run spans ε
        cells += [(m, e, s) for s in seeds for e in batch for m in METHODS]
    sims: dict[str, tuple[dict[str, Any], list[Any]]] = {}
    for method, epsilon, seed in cells:
        values = cell_overrides(method, epsilon, seed, out, rounds)
        if (Path(values["output-dir"]) / "summary.json").is_file():
            continue
        top = simulation_top(method, values)
        name = "." if len(top) == 2 else f"sim-{slug(method.name)}-eps{epsilon:g}-seed{seed}"
        label = f"{slug(method.name)}/eps{epsilon}/seed{seed}"
        sims.setdefault(name, (top, []))[1].append(multirun.Cell(label, _resolve(values)))
    todo = sum(len(c) for _, c in sims.values())
    print(f"privacy_utility: {len(cells)} cells, {todo} to run in {len(sims)} simulation(s)")
    start = machine_state()
    codes = [
        multirun.launch_plan(out / name, runs, top, ray_cluster.federation_of(federation), CATALOG)
        for name, (top, runs) in sims.items()
    ]
    if todo:
        record_session(out, start, machine_state(), todo)
    return max(codes, default=0)


def machine_state() -> dict[str, Any]:
    """CPUs, the 1-minute load average and the UTC time (what shared the machine)."""
    import datetime
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return {"cpus": os.cpu_count(), "load_1min": load, "time": now}


def record_session(out: Path, start: Mapping, end: Mapping, cells: int) -> None:
    """Append one invocation (start, end, cells run) to ``out/sessions.json``."""
    path = out / "sessions.json"
    sessions = json.loads(path.read_text()) if path.is_file() else []
    sessions.append({"start": dict(start), "end": dict(end), "cells": cells})
    path.write_text(json.dumps(sessions, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    from fedpriv.scenarios.cli import launch

    parser = argparse.ArgumentParser(
        description="Run the privacy-utility grid (complete cells skipped)."
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epsilons", default="1,2,4,8")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rounds", type=int, default=BASE["num-server-rounds"])
    launch.add_federation_option(parser)
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    return run(args.out, epsilons, seeds, args.rounds, args)


if __name__ == "__main__":
    sys.exit(main())
