"""The privacy–utility page of ``bench/privacy_utility.py`` runs, one panel per like-for-like
comparison (:data:`bench.privacy_utility.PANELS`): (a) replace-one at 20 of 100 fixed-size,
the fixed-clipping sweep with its best C per ε against adaptive clipping (C over rounds) and
DP-FTRL at the replace-one z; (b) add/remove ≡ replace-special at 20 a round, DP-FTRL against
Poisson DP-FedAvg; (c) individualised budgets against the uniform assignment at the smallest
budget, at the same z and Poisson sampling, with the budget each group leaves unspent. Tables
are mean ± std over seeds; the plot has ±1 std bands and its legends below the axes."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.privacy_utility import (
    ADAPTIVE,
    BASE,
    BUDGET_RATIOS,
    BUDGETS,
    FTRL,
    FTRL_MF,
    FTRL_REPLACE_ONE,
    METHODS,
    NO_DP,
    PANELS,
    POISSON_FEDAVG,
    SWEEP,
    Method,
    slug,
)

Table = Mapping[tuple[str, float | None], Mapping[str, Any]]
WITHIN = 0.05  # DP-FTRL keeps up: its mean at least the comparator's less this


def session_lines(out: Path) -> list[str]:
    """One line per recorded invocation of ``run``."""
    path = out / "sessions.json"
    if not path.is_file():
        return ["- (no sessions.json: machine and load not recorded)"]
    return [
        f"- {s['cells']} cells to run, {s['start']['time']} → {s['end']['time']} on "
        f"{s['start']['cpus']} CPUs, 1-min load {s['start']['load_1min']:.1f} → "
        f"{s['end']['load_1min']:.1f}" + (f" ({s['note']})" if s.get("note") else "")
        for s in json.loads(path.read_text())
    ]


def summaries(out: Path, method: Method) -> list[tuple[float | None, int, dict]]:
    """(ε target, seed, summary.json) of every finished cell of ``method``; the summary's
    ``run_config`` is the cell's run-config.json ``config``."""
    found = []
    for path in sorted((out / slug(method.name)).glob("eps*/seed*/summary.json")):
        tag = path.parent.parent.name
        epsilon = None if tag == "eps-inf" else float(tag[3:])
        summary = json.loads(path.read_text())
        config = path.parent / "run-config.json"
        summary["run_config"] = json.loads(config.read_text())["config"] if config.is_file() else {}
        found.append((epsilon, int(path.parent.name[4:]), summary))
    return found


def read_cells(out: Path) -> list[dict[str, Any]]:
    """One row per finished cell: method, ε target, seed, accuracy, z, reported ε, wall."""
    rows = []
    for method in (NO_DP, *METHODS):
        for epsilon, seed, summary in summaries(out, method):
            rows.append({
                "method": method.name, "epsilon": epsilon, "seed": seed,
                "accuracy": float(summary["final"]["accuracy"]),
                "z": summary["run_config"].get("noise-multiplier"),
                "reported_epsilon": reported_epsilon(summary),
                "wall_s": summary.get("wall_seconds"),
            })  # fmt: skip
    return rows


def reported_epsilon(summary: Mapping[str, Any]) -> float | None:
    """The ε a run reported: its headline, or the largest per-client ε (client budgets)."""
    privacy = summary.get("privacy") or {}
    value = privacy.get("epsilon")
    if isinstance(value, dict):
        value = value.get("epsilon")
    return float(value) if isinstance(value, int | float) else None


def aggregate(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float | None], dict]:
    """(method, ε) -> mean, std (0 for one seed), n, seeds and the mean z."""
    groups: dict[tuple[str, float | None], list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["method"], row["epsilon"]), []).append(row)
    table = {}
    for key, items in groups.items():
        accs = [float(r["accuracy"]) for r in items]
        zs = [float(r["z"]) for r in items if r["z"] not in (None, "auto")]  # str in configs
        table[key] = {
            "mean": statistics.fmean(accs),
            "std": statistics.stdev(accs) if len(accs) > 1 else 0.0,
            "n": len(accs),
            "seeds": sorted(int(r["seed"]) for r in items),
            "z": statistics.fmean(zs) if zs else None,
        }
    return table


def epsilons_of(table: Table) -> list[float]:
    """The target ε columns, ascending."""
    return sorted({e for _, e in table if e is not None})


def stat_text(stat: Mapping[str, Any] | None, most: int) -> str:
    """``mean ± std (z …)``, with the number of seeds when fewer than the most."""
    if stat is None:
        return "—"
    fewer = "" if stat["n"] == most else f", {stat['n']} seed(s)"
    z = "" if stat["z"] is None else f"z {stat['z']:.2f}"
    return f"{stat['mean']:.3f} ± {stat['std']:.3f} ({z}{fewer})"


def best_fixed(table: Table, epsilon: float) -> tuple[Method, Mapping[str, Any]] | None:
    """The fixed-clipping sweep's best mean at ``epsilon`` (selected on the test accuracy it
    reports, so optimistic for fixed clipping)."""
    found = [(m, table[(m.name, epsilon)]) for m in SWEEP if (m.name, epsilon) in table]
    return max(found, key=lambda pair: pair[1]["mean"], default=None)


def panel_table(table: Table, methods: Sequence[Method], best: bool = False) -> str:
    """Rows = methods (and the sweep's best C per ε), columns = target ε."""
    epsilons = epsilons_of(table)
    most = max((s["n"] for s in table.values()), default=0)
    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |",
             "|---|" + "---|" * len(epsilons)]  # fmt: skip
    for method in methods:
        cells = [stat_text(table.get((method.name, e)), most) for e in epsilons]
        lines.append(f"| {method.name} | " + " | ".join(cells) + " |")
    if best:
        cells = []
        for e in epsilons:
            pick = best_fixed(table, e)
            name = "—" if pick is None else pick[0].overrides["clipping-norm"]
            cells.append("—" if pick is None else f"C = {name:g}: {stat_text(pick[1], most)}")
        lines.append("| **best fixed C** (per ε) | " + " | ".join(cells) + " |")
    ref = table.get((NO_DP.name, None))
    if ref is not None:
        lines.append(f"| {NO_DP.name} (ε = ∞) | {ref['mean']:.3f} ± {ref['std']:.3f} |"
                     + " |" * (len(epsilons) - 1))  # fmt: skip
    return "\n".join(lines)


def gap_line(table: Table, epsilon: float, ftrl: Method, other: str, stat: Mapping) -> str:
    """DP-FTRL's mean against a comparator's at one ε: within 0.05 or not."""
    mine = table.get((ftrl.name, epsilon))
    if mine is None:
        return f"- ε = {epsilon:g}: {ftrl.name} not run"
    gap = mine["mean"] - stat["mean"]
    verdict = "within 0.05 or above: yes" if gap >= -WITHIN else "within 0.05 or above: NO"
    return (
        f"- ε = {epsilon:g}: {ftrl.name} {mine['mean']:.3f} vs {other} {stat['mean']:.3f} "
        f"({gap:+.3f}; {mine['n']} vs {stat['n']} seeds): {verdict}"
    )


def ftrl_lines(table: Table) -> list[str]:
    """DP-FTRL against DP-FedAvg in panels (a) (its best fixed C and C = 0.5, DP-FTRL's own
    C) and (b), at every ε."""
    lines = []
    for e in epsilons_of(table):
        pick = best_fixed(table, e)
        if pick is not None:
            lines.append(gap_line(table, e, FTRL_REPLACE_ONE, f"best {pick[0].name}", pick[1]))
        same_c = table.get((SWEEP[1].name, e))
        if same_c is not None:
            lines.append(gap_line(table, e, FTRL_REPLACE_ONE, SWEEP[1].name, same_c))
        poisson = table.get((POISSON_FEDAVG.name, e))
        if poisson is not None:
            for ftrl in (FTRL, FTRL_MF):
                lines.append(gap_line(table, e, ftrl, POISSON_FEDAVG.name, poisson))
    return lines


def clip_norms(out: Path) -> dict[float, list[list[float]]]:
    """Adaptive clipping's C per round, one list per seed, by target ε."""
    found: dict[float, list[list[float]]] = {}
    for epsilon, _, summary in summaries(out, ADAPTIVE):
        norms = (summary.get("privacy") or {}).get("clipping_norm_per_round") or []
        if epsilon is not None and norms:
            found.setdefault(epsilon, []).append([float(c) for c in norms])
    return found


def clip_lines(norms: Mapping[float, list[list[float]]]) -> list[str]:
    """A table of adaptive clipping's mean C at rounds 1, 5, 10, 15 and the last."""
    if not norms:
        return ["(no adaptive-clipping cells)"]
    length = min(len(n) for runs in norms.values() for n in runs)
    picks = sorted({r for r in (1, 5, 10, 15, length) if r <= length})
    lines = ["| ε | " + " | ".join(f"C at round {r}" for r in picks) + " |",
             "|---|" + "---|" * len(picks)]  # fmt: skip
    for epsilon, runs in sorted(norms.items()):
        means = [statistics.fmean(run[r - 1] for run in runs) for r in picks]
        lines.append(f"| {epsilon:g} | " + " | ".join(f"{c:.3f}" for c in means) + " |")
    return lines


def budget_groups(summary: Mapping[str, Any]) -> dict[float, dict[str, float]]:
    """Client budgets per budget group: clients, mean q_i, the largest ε spent and the
    budget left unspent by the group's most-spent client."""
    clients = (summary.get("privacy") or {}).get("epsilon_per_client") or {}
    groups: dict[float, list[Mapping[str, Any]]] = {}
    for c in clients.values():
        groups.setdefault(float(c["budget"]), []).append(c)
    return {
        budget: {
            "clients": float(len(items)),
            "q": statistics.fmean(float(c["sampling_rate"]) for c in items),
            "spent": max(float(c["epsilon"]) for c in items),
            "unspent": budget - max(float(c["epsilon"]) for c in items),
        }
        for budget, items in sorted(groups.items())
    }


def budget_lines(out: Path, table: Table) -> list[str]:
    """Panel (c): per ε and budget group, accuracy, q, ε spent and unspent, individualised
    against the uniform assignment (every client at the smallest budget ε, q = 0.2)."""
    by_eps: dict[float, list[dict[float, dict[str, float]]]] = {}
    for epsilon, _, summary in summaries(out, BUDGETS):
        if epsilon is not None:
            by_eps.setdefault(epsilon, []).append(budget_groups(summary))
    lines = ["| ε (smallest budget) | assignment | accuracy | budget group | q | ε spent | "
             "unspent |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for epsilon in sorted(set(by_eps) | {e for m, e in table if m == POISSON_FEDAVG.name and e}):
        uniform = table.get((POISSON_FEDAVG.name, epsilon))
        acc = "—" if uniform is None else f"{uniform['mean']:.3f} ± {uniform['std']:.3f}"
        for r in BUDGET_RATIOS:
            budget = epsilon * r
            lines.append(f"| {epsilon:g} | uniform (ε for all) | {acc} | {budget:g} | 0.2 | "
                         f"{epsilon:g} | {budget - epsilon:g} |")  # fmt: skip
        stat = table.get((BUDGETS.name, epsilon))
        acc = "—" if stat is None else f"{stat['mean']:.3f} ± {stat['std']:.3f}"
        runs = by_eps.get(epsilon, [])
        for budget in sorted({b for run in runs for b in run}):
            vals = [run[budget] for run in runs if budget in run]
            q = statistics.fmean(v["q"] for v in vals)
            spent = max(v["spent"] for v in vals)
            unspent = min(v["unspent"] for v in vals)
            lines.append(f"| {epsilon:g} | individualised | {acc} | {budget:g} | {q:.3f} | "
                         f"{spent:.3f} | {unspent:.3f} |")  # fmt: skip
    return lines


def replace_one_lines(out: Path) -> list[str]:
    """DP-FTRL's replace-one ε: dp_accounting's replace-special ε of its trees at z/2 (a
    contribution's replacement moves a leaf by 2C, twice replace-special's C)."""
    from fedpriv.privacy.ftrl import tree_epsilon
    from fedpriv.privacy.modes.dp_ftrl import steps_per_tree

    lines = []
    for epsilon, seed, summary in summaries(out, FTRL_REPLACE_ONE):
        cfg = summary["run_config"]
        z = float(cfg["noise-multiplier"])
        restart = int(cfg.get("ftrl-restart-rounds") or 0) or (
            int(cfg["num-clients"]) // int(cfg["clients-per-round"])
        )
        estimator = str(cfg.get("ftrl-estimator", "honaker"))
        steps = steps_per_tree(int(cfg["num-server-rounds"]), restart, estimator)
        delta = float(cfg.get("dp-delta", 1e-5))
        half = tree_epsilon(z / 2, steps, delta, estimator)["epsilon"]
        lines.append(f"- ε = {epsilon:g}, seed {seed}: z {z:.3f}; the run's replace-special ε "
                     f"{reported_epsilon(summary) or float('nan'):.3f}; replace-one ε "
                     f"(replace-special at z/2 = {z / 2:.3f}) {half:.3f}")  # fmt: skip
    return lines


def reported_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """(method, target ε) -> the largest ε a run of it reported (every seed)."""
    worst: dict[tuple[str, float], float] = {}
    for row in rows:
        if row["epsilon"] is not None and row["reported_epsilon"] is not None:
            key = (row["method"], row["epsilon"])
            worst[key] = max(worst.get(key, 0.0), float(row["reported_epsilon"]))
    return [f"- {m} at ε = {e:g}: reported {v:.3f}" for (m, e), v in sorted(worst.items())]


def _band(ax: Any, table: Table, name: str, label: str, **style: Any) -> None:
    points = sorted((e, s) for (m, e), s in table.items() if m == name and e)
    if not points:
        return
    xs = [e for e, _ in points]
    mean = [s["mean"] for _, s in points]
    std = [s["std"] for _, s in points]
    (line,) = ax.plot(xs, mean, marker="o", label=label, **style)
    low = [m - d for m, d in zip(mean, std)]
    high = [m + d for m, d in zip(mean, std)]
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)


def plot(table: Table, norms: Mapping[float, list[list[float]]], path: Path) -> Path:
    """Write :func:`figure` to ``path``."""
    import matplotlib.pyplot as plt

    fig = figure(table, norms)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def figure(table: Table, norms: Mapping[float, list[list[float]]]) -> Any:
    """Panels (a)–(c) of accuracy against ε (log2 axis, ±1 std) and adaptive clipping's C
    over rounds; each legend below its axes, outside the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 5.6))
    panels = {"a": (*SWEEP, ADAPTIVE, FTRL_REPLACE_ONE), "b": (POISSON_FEDAVG, FTRL, FTRL_MF),
              "c": (POISSON_FEDAVG, BUDGETS)}  # fmt: skip
    ref = table.get((NO_DP.name, None))
    for ax, (panel, methods) in zip(axes, panels.items()):
        for method in methods:
            thin = method in SWEEP
            label = method.name
            if panel == "c" and method is POISSON_FEDAVG:
                label = "uniform: every client ε, Poisson q = 0.2 [add/remove]"
            _band(ax, table, method.name, label, linewidth=1.0 if thin else 2.0,
                  linestyle=":" if thin else "-")  # fmt: skip
        if ref is not None:
            ax.axhline(ref["mean"], color="grey", linestyle="--", label="no DP")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("target ε (δ = 1e-5)" + (", smallest budget" if panel == "c" else ""))
        ax.set_ylabel("final test accuracy")
        ax.set_title(PANELS[panel], fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    ax = axes[3]
    for epsilon, runs in sorted(norms.items()):
        length = min(len(r) for r in runs)
        mean = [statistics.fmean(run[i] for run in runs) for i in range(length)]
        ax.plot(range(1, length + 1), mean, marker=".", label=f"adaptive, ε = {epsilon:g}")
    for method in SWEEP:
        ax.axhline(method.overrides["clipping-norm"], color="grey", linewidth=0.6, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("clipping norm C (dotted: the fixed sweep)")
    ax.set_title("(d) adaptive clipping's C over rounds (mean of seeds)", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.suptitle("digits, 100 clients, 20 a round: accuracy vs ε, mean ± std over seeds")
    fig.tight_layout()
    return fig


READING = (
    "- One relation per panel. (a) replace-one: DP-FedAvg and adaptive clipping are "
    "accounted so by their runs; DP-FTRL is accounted by dp_accounting under replace-special "
    "only, so its replace-one z is twice the replace-special z of the target (a replacement "
    "moves a leaf by 2C, a zeroing by C; Gaussian ε depends on σ/Δ only), checked below. "
    "(b) add/remove ≡ replace-special: with the sum divided by a fixed 20, removing a "
    "client's update and zeroing it release the same thing, so Poisson DP-FedAvg's "
    "add/remove ε bounds its replace-special ε, DP-FTRL's own relation.",
    "- Clients per round: 20 in every panel (Poisson: 20 expected). DP-FTRL asks 20 a round "
    "from a secret permutation per epoch (shuffled epochs; the tree at ftrl-momentum 0, the "
    "factorization at momentum 0.5 and server learning rate 0.5) and assumes no "
    "amplification: its ε holds whoever sees the sampling. The DP-FedAvg rows' ε needs the "
    "server's sample to be secret and as stated. DP-FTRL tree: one 5-leaf tree per epoch "
    "with Honaker's estimate (Kairouz et al.); DP-FTRL mf: one matrix factorization for the "
    "run's 20 rounds in epochs of 5 (ftrl-estimator = mf, Choquette-Choo et al. 2023).",
    "- Why the tree trails Poisson DP-FedAvg at ε 4 and the factorization does not (b): with "
    "no amplification the tree's node noise is z = 4.01 against DP-FedAvg's 1.35 at "
    "q = 0.2; summed over the 20 rounds the variance of the model's noise is 1,097 (z·C)²/z² "
    "units against DP-FedAvg's 383, and the clients of every round train from that noisy a "
    "model. The factorization needs z = 1.08 for the same ε (one Gaussian event: each "
    "client's 4 contributions enter C·x with sensitivity 1), and C is optimised for the "
    "server's momentum (the model is W·x with W the prefix sums of the momentum): 273 "
    "summed, with the std of the model's noise 1.38 times DP-FedAvg's in round 1, 1.02 in "
    "round 3 and 0.72-0.89 times from round 4 on (docs/privacy.md, DP-FTRL).",
    "- Fixed clipping is swept over C; the best C per ε is chosen on the same test accuracy "
    "it reports (optimistic for fixed clipping: Andrew et al. compare adaptive clipping with "
    "the best fixed C). Adaptive clipping starts at C0 = 0.5 with γ = 0.5, η_C = 0.2 and "
    "σ_b = 2z (z < 2σ_b at every ε); panel (d) and its table show where C goes.",
    "- Individualised budgets (c): groups ε, 2ε, 4ε (a third of the clients each), at the "
    "uniform row's z; each client's q_i meets its own budget, so the larger-budget groups "
    "are sampled more often and the expected cohort is above 20. The uniform assignment "
    "gives every client the smallest budget ε; the table shows what each group leaves "
    "unspent under each assignment.",
    "- Accuracy is the final round's on 180 test examples (one example = 0.0056); 20 rounds; "
    "hyper-parameters other than C not tuned per method.",
)


def report(out: Path, page: Path, plot_path: Path) -> str:
    """Write the page and the plot of the cells under ``out``; return the page's text."""
    rows = read_cells(out)
    table = aggregate(rows)
    norms = clip_norms(out)
    plot(table, norms, plot_path)
    seeds = sorted({int(r["seed"]) for r in rows})
    covers = [f"- **{m.name}** (`{m.mode}`): {m.covers}." for m in METHODS]
    wall = sum(float(r["wall_s"] or 0.0) for r in rows)
    text = "\n".join(
        [
            "# Privacy–utility: accuracy against ε (digits, 100 clients)",
            "",
            "Generated by `make privacy-utility` (`python -m bench.privacy_utility`, then "
            f"`python -m bench.privacy_utility_page`) from {len(rows)} runs (seeds "
            f"{', '.join(map(str, seeds))}; summed cell wall time {wall / 60:.1f} min).",
            "",
            "Setting: " + ", ".join(f"{k} = {v}" for k, v in BASE.items()) + ", δ = 1e-5. "
            "Every cell runs at the smallest noise multiplier z whose ε meets the target, "
            "found by the planner (`fedpriv epsilon --target-epsilon`), except where a row "
            "says otherwise.",
            "",
            f"![accuracy against ε, three like-for-like panels]({plot_path.name})",
            "",
            f"## {PANELS['a']}",
            "",
            panel_table(table, (*SWEEP, ADAPTIVE, FTRL_REPLACE_ONE), best=True),
            "",
            "Adaptive clipping's C (mean over seeds):",
            "",
            *clip_lines(norms),
            "",
            f"## {PANELS['b']}",
            "",
            panel_table(table, (POISSON_FEDAVG, FTRL, FTRL_MF)),
            "",
            "## DP-FTRL against DP-FedAvg, same relation and clients per round",
            "",
            *ftrl_lines(table),
            "",
            f"## {PANELS['c']}",
            "",
            panel_table(table, (POISSON_FEDAVG, BUDGETS)),
            "",
            "Per budget group (q: mean sampling rate; ε spent: the group's largest; "
            "unspent: budget − ε spent, the smallest over seeds):",
            "",
            *budget_lines(out, table),
            "",
            "## How to read it",
            "",
            *READING,
            "",
            "## What each ε covers",
            "",
            *covers,
            "",
            "## ε reported by the runs (largest over seeds)",
            "",
            *reported_lines(rows),
            "",
            "DP-FTRL at the replace-one z, its ε converted:",
            "",
            *replace_one_lines(out),
            "",
            "## Invocations (machine shared with other jobs)",
            "",
            *session_lines(out),
            "",
        ]
    )
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the privacy-utility page and plot.")
    parser.add_argument("out", type=Path, help="the directory bench/privacy_utility.py ran into")
    parser.add_argument("--page", type=Path, default=Path("docs/results/privacy-utility.md"))
    parser.add_argument("--plot", type=Path, default=Path("docs/results/privacy-utility.png"))
    args = parser.parse_args(argv)
    print(report(args.out, args.page, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
