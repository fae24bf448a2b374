"""Privacy–utility grid: final accuracy against the target ε for the server-side DP modes.

``python bench/privacy_utility.py run --out D`` runs every (method, ε, seed) cell of
:data:`METHODS` × ``--epsilons`` × ``--seeds`` on the cross-device digits setting
(:data:`BASE`: 100 clients) inside ONE Flower simulation (the ``run-plan`` machinery of
``fedpriv grid``, :func:`scenarios.app.multirun.launch_plan`), each cell at its own noise
multiplier: the smallest z whose ε meets the target, found by the planner
(:func:`fedpriv.privacy.accounting.target.noise_for_target`, what ``fedpriv epsilon
--target-epsilon`` prints). ``client-budgets`` has no z to target: its budget group is set to
the target ε and the server calibrates each client's own Poisson rate q_i at the z of
fixed-clipping DP-FedAvg at that ε. ``python bench/privacy_utility.py report D --page P``
writes the table (mean ± std over seeds) and the plot beside it.

Cells already complete (summary.json) are skipped, so a cut run resumes.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
        "no amplification: any participation with each client at most once per restart (5 rounds)",
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
    from scenarios.config.features import CATALOG
    from scenarios.config.specs import server_run

    return server_run(cfg, CATALOG.kind(cfg)).spec


def _resolve(overrides: Mapping[str, Any]) -> dict[str, Any]:
    from scenarios.cli import launch
    from scenarios.config.features import CATALOG

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
    rounds (release keys: a message changing them is refused), so their cells run in a
    simulation whose config is the cell's (one per ε); the others share one."""
    top = {"scenario": BASE["scenario"], "num-clients": BASE["num-clients"]}
    if method.mode != client_budgets.MODE.name:
        return top
    return {**top, **{k: v for k, v in values.items() if k not in ("seed", "output-dir")}}


def run(
    out: Path,
    epsilons: Sequence[float],
    seeds: Sequence[int],
    rounds: int,
    federation: argparse.Namespace,
) -> int:
    """Every cell (complete cells skipped): one simulation, plus one per client-budgets ε."""
    from scenarios.app import multirun
    from scenarios.cli import ray_cluster
    from scenarios.config.features import CATALOG

    cells = [(NO_DP, None, s) for s in seeds]
    for batch in (epsilons[1::2], epsilons[0::2]):  # every other ε first: a cut run spans ε
        cells += [(m, e, s) for s in seeds for e in batch for m in METHODS]
    sims: dict[str, tuple[dict[str, Any], list[Any]]] = {}
    for method, epsilon, seed in cells:
        values = cell_overrides(method, epsilon, seed, out, rounds)
        if (Path(values["output-dir"]) / "summary.json").is_file():
            continue
        top = simulation_top(method, values)
        name = "." if len(top) == 2 else f"sim-{slug(method.name)}-eps{epsilon:g}"
        label = f"{slug(method.name)}/eps{epsilon}/seed{seed}"
        sims.setdefault(name, (top, []))[1].append(multirun.Cell(label, _resolve(values)))
    todo = sum(len(c) for _, c in sims.values())
    print(f"privacy_utility: {len(cells)} cells, {todo} to run in {len(sims)} simulation(s)")
    codes = [
        multirun.launch_plan(out / name, runs, top, ray_cluster.federation_of(federation), CATALOG)
        for name, (top, runs) in sims.items()
    ]
    return max(codes, default=0)


# --- report ---------------------------------------------------------------------------------


def final_accuracy(summary: Mapping[str, Any]) -> float:
    """The last round's centralized accuracy of a summary.json."""
    return float(summary["final"]["accuracy"])


def read_cells(out: Path) -> list[dict[str, Any]]:
    """One row per finished cell: method, ε target, seed, accuracy, z, reported ε, wall."""
    rows = []
    for method in (NO_DP, *METHODS):
        for path in sorted((out / slug(method.name)).glob("eps*/seed*/summary.json")):
            summary = json.loads(path.read_text())
            tag = path.parent.parent.name
            cfg = json.loads((path.parent / "run-config.json").read_text())["config"]
            rows.append({
                "method": method.name,
                "epsilon": None if tag == "eps-inf" else float(tag[3:]),
                "seed": int(path.parent.name[4:]),
                "accuracy": final_accuracy(summary),
                "z": cfg.get("noise-multiplier"),
                "reported_epsilon": _reported_epsilon(summary),
                "wall_s": summary.get("wall_seconds"),
            })  # fmt: skip
    return rows


def _reported_epsilon(summary: Mapping[str, Any]) -> float | None:
    privacy = summary.get("privacy") or {}
    value = privacy.get("epsilon")
    if isinstance(value, dict):
        value = value.get("epsilon")
    if isinstance(value, int | float):
        return float(value)
    values = privacy.get("client_epsilon") or {}
    return float(values["max"]) if isinstance(values, dict) and "max" in values else None


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float | None], dict]:
    """(method, ε) -> mean, std (0 for one seed), n, seeds and the mean z."""
    groups: dict[tuple[str, float | None], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["epsilon"]), []).append(row)
    table = {}
    for key, items in groups.items():
        accs = [float(r["accuracy"]) for r in items]
        zs = [float(r["z"]) for r in items if r["z"] not in (None, "auto")]
        table[key] = {
            "mean": statistics.fmean(accs),
            "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "n": len(accs),
            "seeds": sorted(int(r["seed"]) for r in items),
            "z": statistics.fmean(zs) if zs else None,
        }
    return table


def markdown_table(table: Mapping[tuple[str, float | None], Mapping[str, Any]]) -> str:
    """Rows = methods, columns = target ε: ``mean ± std (z)``."""
    epsilons = sorted({e for _, e in table if e is not None})
    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |",
             "|---|" + "---|" * len(epsilons)]  # fmt: skip
    for method in METHODS:
        cells = []
        for e in epsilons:
            stat = table.get((method.name, e))
            cells.append("—" if stat is None else
                         f"{stat['mean']:.3f} ± {stat['std']:.3f} (z {stat['z']:.2f})")  # fmt: skip
        lines.append(f"| {method.name} | " + " | ".join(cells) + " |")
    ref = table.get((NO_DP.name, None))
    if ref is not None:
        lines.append(f"| {NO_DP.name} (ε = ∞) | {ref['mean']:.3f} ± {ref['std']:.3f} "
                     "(all columns) |" + " |" * (len(epsilons) - 1))  # fmt: skip
    return "\n".join(lines)


def plot(table: Mapping[tuple[str, float | None], Mapping[str, Any]], path: Path) -> Path:
    """Accuracy against ε (log2 axis), mean line and a ±1 std band per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for method in METHODS:
        points = sorted((e, s) for (m, e), s in table.items() if m == method.name and e)
        if not points:
            continue
        xs = [e for e, _ in points]
        mean = [s["mean"] for _, s in points]
        std = [s["std"] for _, s in points]
        (line,) = ax.plot(xs, mean, marker="o", label=method.name)
        low = [m - d for m, d in zip(mean, std)]
        high = [m + d for m, d in zip(mean, std)]
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
    ref = table.get((NO_DP.name, None))
    if ref is not None:
        ax.axhline(ref["mean"], color="grey", linestyle="--", label="no DP")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("target ε (δ = 1e-5)")
    ax.set_ylabel("final test accuracy")
    ax.set_title("digits, 100 clients: accuracy vs ε (mean ± std over seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def reported_epsilons(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float], float]:
    """(method, target ε) -> the largest ε a run of it reported (every seed)."""
    worst: dict[tuple[str, float], float] = {}
    for row in rows:
        if row["epsilon"] is not None and row["reported_epsilon"] is not None:
            key = (row["method"], row["epsilon"])
            worst[key] = max(worst.get(key, 0.0), float(row["reported_epsilon"]))
    return worst


def ftrl_gap(table: Mapping[tuple[str, float | None], Mapping[str, Any]]) -> list[str]:
    """One line per (ε, comparator): DP-FTRL's mean accuracy against each DP-FedAvg whose ε
    assumes no amplification either."""
    ftrl = METHODS[2].name
    lines = []
    for (method, e), stat in sorted(table.items(), key=lambda kv: kv[0][1] or 0):
        for name in NO_AMPLIFICATION if method == ftrl else ():
            other = table.get((name, e))
            if other is None:
                continue
            gap = stat["mean"] - other["mean"]
            verdict = "beats" if gap > 0 else "does not beat"
            lines.append(
                f"- ε = {e:g}: DP-FTRL {stat['mean']:.3f} vs {name} {other['mean']:.3f}: "
                f"{verdict} it by {abs(gap):.3f}"
            )
    return lines


def cell_details(summary: Mapping[str, Any]) -> dict[str, float]:
    """What a cell's summary says beyond accuracy: DP-FTRL's participants per round (m less
    the clients already in the tree), adaptive clipping's final C, client budgets' rate q_i."""
    privacy = summary.get("privacy") or {}
    details: dict[str, float] = {}
    excluded = privacy.get("repeat_excluded_per_round")
    if excluded:
        m = float(privacy.get("num_sampled_clients", 0))
        details["participants/round"] = m - statistics.fmean(excluded)
    norms = privacy.get("clipping_norm_per_round")
    if norms:
        details["final C"] = float(norms[-1])
    clients = privacy.get("epsilon_per_client") or {}
    rates = [float(c["sampling_rate"]) for c in clients.values() if "sampling_rate" in c]
    if rates:
        details["q_i"] = statistics.fmean(rates)
        details["max client ε"] = max(float(c.get("epsilon", 0.0)) for c in clients.values())
    return details


def details_lines(out: Path) -> list[str]:
    """One line per (method, ε) with a detail: the mean over its seeds."""
    lines = []
    for method in METHODS:
        for tag in sorted((out / slug(method.name)).glob("eps*"), key=lambda p: float(p.name[3:])):
            found: dict[str, list[float]] = {}
            for path in sorted(tag.glob("seed*/summary.json")):
                for key, value in cell_details(json.loads(path.read_text())).items():
                    found.setdefault(key, []).append(value)
            if found:
                parts = [f"{k} {statistics.fmean(v):.3g}" for k, v in found.items()]
                lines.append(f"- {method.name}, ε = {tag.name[3:]}: " + ", ".join(parts))
    return lines


def accountants(out: Path) -> list[str]:
    """Each method's accountant, adjacency and sampling as its runs recorded them."""
    lines = []
    for method in METHODS:
        path = next(iter(sorted((out / slug(method.name)).glob("eps*/seed*/summary.json"))), None)
        if path is None:
            continue
        privacy = json.loads(path.read_text()).get("privacy") or {}
        block = privacy.get("epsilon")
        if not isinstance(block, dict):
            block = privacy
        said = [str(block[k]) for k in ("adjacency", "sampling") if block.get(k)]
        if said:
            lines.append(f"- {method.name}: " + "; ".join(said))
    return lines


def report(out: Path, page: Path, plot_path: Path) -> str:
    """Write the page (table, reported ε, the DP-FTRL comparison) and the plot of the cells
    under ``out``; return the page's text."""
    rows = read_cells(out)
    table = aggregate(rows)
    worst = reported_epsilons(rows)
    plot(table, plot_path)
    seeds = sorted({int(r["seed"]) for r in rows})
    covers = [f"- **{m.name}** (`{m.mode}`): {m.covers}." for m in METHODS]
    checks = [f"- {m} at ε = {e:g}: reported {v:.3f}" for (m, e), v in sorted(worst.items())]
    wall = sum(float(r["wall_s"] or 0.0) for r in rows)
    text = "\n".join(
        [
            "# Privacy–utility: accuracy against ε (digits, 100 clients)",
            "",
            "Generated by `make privacy-utility` (`bench/privacy_utility.py`) from "
            f"{len(rows)} runs (seeds {', '.join(map(str, seeds))}; "
            f"summed cell wall time {wall / 60:.1f} min).",
            "",
            "Setting: " + ", ".join(f"{k} = {v}" for k, v in BASE.items()) + ", δ = 1e-5. "
            "Every cell runs at the smallest noise multiplier z whose ε meets the target, found by "
            "the planner (`fedpriv epsilon --target-epsilon`).",
            "",
            f"![accuracy against ε]({plot_path.name})",
            "",
            "Final test accuracy, mean ± std over seeds (z of the cell):",
            "",
            markdown_table(table),
            "",
            "## What each ε covers",
            "",
            *covers,
            "",
            "As the runs recorded it (adjacency; sampling):",
            "",
            *accountants(out),
            "",
            "## ε reported by the runs (largest over seeds)",
            "",
            *checks,
            "",
            "## DP-FTRL against DP-FedAvg at the same ε, no amplification assumed",
            "",
            *ftrl_gap(table),
            "",
            "## Per-cell details (mean over seeds)",
            "",
            *details_lines(out),
            "",
        ]
    )
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    from scenarios.cli import launch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="run the grid (complete cells skipped)")
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument("--epsilons", default="1,2,4,8")
    run_p.add_argument("--seeds", default="0,1")
    run_p.add_argument("--rounds", type=int, default=BASE["num-server-rounds"])
    launch.add_federation_option(run_p)
    rep = sub.add_parser("report", help="table + plot of a run directory")
    rep.add_argument("out", type=Path)
    rep.add_argument("--page", type=Path, default=Path("docs/results/privacy-utility.md"))
    rep.add_argument("--plot", type=Path, default=Path("docs/results/privacy-utility.png"))
    args = parser.parse_args(argv)
    if args.command == "run":
        epsilons = [float(e) for e in args.epsilons.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
        return run(args.out, epsilons, seeds, args.rounds, args)
    print(report(args.out, args.page, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
