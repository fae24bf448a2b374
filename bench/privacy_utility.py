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
    distributed_dp,
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


@dataclass(frozen=True, eq=False)  # one object per line: hashed and compared by identity
class Method:
    """One line of the figure: a privacy mode with its own overrides, the panel it is compared
    in and what its ε covers."""

    name: str
    mode: str
    covers: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    panel: str = ""
    # the planner's config for z when it is not the run's own (mode, overrides)
    z_from: tuple[str, Mapping[str, Any]] | None = None
    # z = z_scale × the planner's z (DP-FTRL in replace-one: sensitivity 2C, so twice the z)
    z_scale: float = 1.0
    # adaptive clipping: σ_b of the clipped count = count_per_z × z (z < 2σ_b)
    count_per_z: float = 0.0


REPLACE_ONE = "replace-one, 20 of 100 fixed-size"
ZERO_OUT = "add/remove ≡ replace-special, 20 of 100 a round"
POISSON = "Poisson add/remove, same z"
PANELS = {
    "a": f"(a) {REPLACE_ONE}",
    "b": f"(b) {ZERO_OUT}",
    "c": "(c) individualised vs uniform budgets, Poisson, same z",
}
SWEEP_C = (0.2, 0.5, 1.0, 0.1)  # fixed clipping norms of panel (a); 0.1 runs last
POISSON_20 = {"client-sampling": "poisson"}  # q = clients-per-round / num-clients = 0.2
BUDGET_RATIOS = (1, 2, 4)  # client budgets: groups ε, 2ε, 4ε (the smallest = the target ε)


def fixed_c(norm: float) -> Method:
    """DP-FedAvg with fixed clipping norm ``norm`` in panel (a)."""
    return Method(
        f"DP-FedAvg C = {norm:g} [replace-one]",
        global_dp.MODE.name,
        f"fixed clipping C = {norm:g}; 20 of 100 per round without replacement, amplified by "
        "sampling (replace-one, sum sensitivity 2C)",
        {"clipping-norm": norm},
        "a",
    )


SWEEP = tuple(fixed_c(c) for c in SWEEP_C)
ADAPTIVE = Method(
    "adaptive clipping C0 = 0.5 [replace-one]",
    adaptive_clip.MODE.name,
    "as fixed clipping (replace-one, amplified); the noisy clipped counts (σ_b = 2z) composed "
    "in: update noise z_Δ = z/√(1 − 1/16) ≈ 1.03 z; γ = 0.5, η_C = 0.2",
    {},
    "a",
    # the planner's ε does not depend on σ_b, only its admission (z < 2σ_b) does
    (adaptive_clip.MODE.name, {"clipped-count-stddev": 100.0}),
    count_per_z=2.0,
)
# the factorization optimised for 20 rounds in epochs of 5 and for the server's momentum 0.5
# at learning rate 0.5 (a step of 1 in the steady state, as FedAvg's): six ε-4 runs 0.810
# against 0.795 without momentum (seeds 0-5, 2026-12-07)
MF = {"ftrl-estimator": "mf", "ftrl-momentum": 0.5, "server-learning-rate": 0.5}
FTRL_REPLACE_ONE = Method(
    "DP-FTRL mf [replace-one: z × 2]",
    dp_ftrl.MODE.name,
    "shuffled epochs (20 of a secret permutation a round), one matrix factorization for the "
    "run and momentum 0.5 (ftrl-estimator = mf, server learning rate 0.5), no amplification; "
    "replace-one by sensitivity 2C: z = 2 × the "
    "replace-special z of the target, so dp_accounting's replace-special ε at z/2 is the target",
    MF,
    "a",
    z_scale=2.0,
)
FTRL = Method(
    "DP-FTRL tree [replace-special]",
    dp_ftrl.MODE.name,
    "shuffled epochs, one 5-leaf tree per epoch with Honaker's estimate, no amplification, "
    "dp_accounting's tree events under replace-special (a client's contributions replaced by "
    "zero, sensitivity C per leaf)",
    {},
    "b",
)
FTRL_MF = Method(
    "DP-FTRL mf [replace-special]",
    dp_ftrl.MODE.name,
    "shuffled epochs, one matrix factorization optimised for the run's 20 rounds in epochs "
    "of 5 and the server's momentum 0.5 (ftrl-estimator = mf, server learning rate 0.5), no "
    "amplification; one GaussianDpEvent(z) under "
    "replace-special (sensitivity 1 for any pattern with a client at most once per epoch)",
    MF,
    "b",
)
POISSON_FEDAVG = Method(
    "DP-FedAvg Poisson q = 0.2 [add/remove]",
    global_dp.MODE.name,
    "each client independently with q = 0.2 (20 expected), the sum divided by 20, "
    "add/remove (sensitivity C; for a fixed-denominator sum, removing a client and zeroing "
    "its update give the same output, so this ε also bounds replace-special); amplified. "
    "Panel (c)'s uniform assignment: every client at the smallest budget",
    POISSON_20,
    "b",
)
BUDGETS = Method(
    "client budgets ε, 2ε, 4ε [Poisson add/remove]",
    client_budgets.MODE.name,
    "three budget groups ε, 2ε, 4ε (client p in group p mod 3; ε = the column's target, the "
    "smallest budget), each client Poisson-sampled at its own q_i, at the z of the uniform "
    "row (DP-FedAvg Poisson q = 0.2 at ε)",
    {"clients-per-round": 0},
    "c",
    (global_dp.MODE.name, POISSON_20),
)
METHODS: tuple[Method, ...] = (
    *SWEEP[:3], ADAPTIVE, FTRL_REPLACE_ONE, FTRL, FTRL_MF, POISSON_FEDAVG, BUDGETS, SWEEP[3],
)  # fmt: skip
NO_DP = Method("no DP", no_dp.MODE.name, "no privacy (reference)")


def slug(name: str) -> str:
    """A directory name for a method."""
    keep = [c if c.isascii() and c.isalnum() else "-" for c in name.lower()]
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


_PLANNED: dict[str, float] = {}
PLANNED_FILE = "planned-z.json"  # the planner's z of every config it was asked (a resume skips)


def planner_z(method: Method, epsilon: float, rounds: int, out: Path | None = None) -> float:
    """The planner's z at ``epsilon`` over ``rounds`` for the method's own config or the one it
    names in :attr:`Method.z_from`; computed once per config (kept in ``out/planned-z.json``
    when ``out`` is given)."""
    from fedpriv.privacy.accounting.target import noise_for_target

    mode, overrides = method.z_from or (method.mode, method.overrides)
    values = {**BASE, "privacy": mode, **overrides, "num-server-rounds": rounds}
    key = json.dumps([values, float(epsilon)], sort_keys=True)
    path = None if out is None else out / PLANNED_FILE
    if key not in _PLANNED and path is not None and path.is_file():
        _PLANNED.update(json.loads(path.read_text()))
    if key not in _PLANNED:
        plan = noise_for_target(_spec(_resolve(values)), epsilon)
        _PLANNED[key] = float(plan["noise_multiplier"])
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_PLANNED, indent=1))
    return _PLANNED[key]


def noise_for(method: Method, epsilon: float, rounds: int, out: Path | None = None) -> float:
    """The cell's z: :attr:`Method.z_scale` × the planner's z (client budgets: the uniform
    row's z; its own rates q_i then meet the budgets)."""
    return method.z_scale * planner_z(method, epsilon, rounds, out)


def budget_groups(epsilon: float) -> str:
    """Client budgets' ``client-epsilon-groups`` for a column: ε·r for r in BUDGET_RATIOS."""
    return ",".join(f"{epsilon * r:g}" for r in BUDGET_RATIOS)


def cell_overrides(
    method: Method, epsilon: float | None, seed: int, out: Path, rounds: int
) -> dict[str, Any]:
    """The run config of one cell (its z from the planner at the target ε)."""
    values = {**BASE, "privacy": method.mode, **method.overrides, "seed": seed}
    values["num-server-rounds"] = rounds
    values["output-dir"] = str(cell_dir(out, method, epsilon, seed))
    if epsilon is None:
        return values
    z = noise_for(method, epsilon, rounds, out)
    values["noise-multiplier"] = z
    if method.count_per_z:
        values["clipped-count-stddev"] = method.count_per_z * z
    if method.mode == client_budgets.MODE.name:
        values["client-epsilon-groups"] = budget_groups(epsilon)
    return values


# modes whose nodes count their releases across every run of a simulation: client budgets
# (its budgets) and distributed DP (a node takes part in at most num-server-rounds rounds:
# a second cell in the same simulation fails every round)
OWN_SIMULATION = (client_budgets.MODE.name, distributed_dp.MODE.name)


def simulation_top(method: Method, values: Mapping[str, Any]) -> dict[str, Any]:
    """The simulation's own config for a cell. Client budgets' nodes own their budget and the
    rounds (release keys: a message changing them is refused) and count their own releases
    across every run of the simulation (as a device would), so each of its cells runs in a
    simulation configured as the cell, and so does distributed DP (its nodes count their
    participations the same way, :data:`OWN_SIMULATION`); the other methods share one."""
    top = {"scenario": BASE["scenario"], "num-clients": BASE["num-clients"]}
    if method.mode not in OWN_SIMULATION:
        return top
    return {**top, **{k: v for k, v in values.items() if k != "output-dir"}}


def cell_order(
    methods: Sequence[Method], epsilons: Sequence[float], seeds: Sequence[int]
) -> list[tuple[Method, float | None, int]]:
    """The no-DP reference first, then the largest ε first (a cut run has the must-show
    columns), seeds before methods; the optional fourth C of the sweep last."""
    cells: list[tuple[Method, float | None, int]] = []
    if NO_DP in methods:
        cells += [(NO_DP, None, s) for s in seeds]
    private = [m for m in methods if m is not NO_DP]
    for late in (False, True):
        chosen = [m for m in private if (m is SWEEP[-1]) == late]
        cells += [(m, e, s) for e in sorted(epsilons, reverse=True) for s in seeds for m in chosen]
    return cells


def run(
    out: Path,
    epsilons: Sequence[float],
    seeds: Sequence[int],
    rounds: int,
    federation: argparse.Namespace,
    methods: Sequence[Method] = (NO_DP, *METHODS),
) -> int:
    """Every cell (complete cells skipped): one simulation, plus one per client-budgets ε."""
    from fedpriv.scenarios.app import multirun
    from fedpriv.scenarios.cli import ray_cluster
    from fedpriv.scenarios.config.features import CATALOG

    cells = cell_order(methods, epsilons, seeds)
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


def parse_grid(
    description: str, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, list[float], list[int], set[str] | None]:
    """A grid's command line (here and ``bench.distributed_utility``): its arguments, the
    target ε list, the seeds, and the method directory names of ``--only`` (None: all)."""
    from fedpriv.scenarios.cli import launch

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epsilons", default="2,4,8")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--rounds", type=int, default=BASE["num-server-rounds"])
    parser.add_argument(
        "--only", default="", help="comma-separated method directory names (default: all)"
    )
    launch.add_federation_option(parser)
    args = parser.parse_args(argv)
    epsilons = [float(e) for e in args.epsilons.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    return args, epsilons, seeds, (set(args.only.split(",")) if args.only else None)


def main(argv: Sequence[str] | None = None) -> int:
    args, epsilons, seeds, only = parse_grid(
        "Run the privacy-utility grid (complete cells skipped).", argv
    )
    methods = [m for m in (NO_DP, *METHODS) if only is None or slug(m.name) in only]
    return run(args.out, epsilons, seeds, args.rounds, args, methods)


if __name__ == "__main__":
    sys.exit(main())
