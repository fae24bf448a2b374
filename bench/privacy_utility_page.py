"""The privacy–utility page of ``bench/privacy_utility.py`` runs: the table (mean ± std over
seeds), the plot with ±1 std bands, what each method's ε covers, the ε each run reported, the
DP-FTRL comparison at the same ε without amplification and the invocations' machine load."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.privacy_utility import BASE, METHODS, NO_AMPLIFICATION, NO_DP, slug


def session_lines(out: Path) -> list[str]:
    """One line per recorded invocation of ``run``."""
    path = out / "sessions.json"
    if not path.is_file():
        return ["- (no sessions.json: machine and load not recorded)"]
    return [
        f"- {s['cells']} cells, {s['start']['time']} → {s['end']['time']} on "
        f"{s['start']['cpus']} CPUs, 1-min load {s['start']['load_1min']:.1f} → "
        f"{s['end']['load_1min']:.1f}" + (f" ({s['note']})" if s.get("note") else "")
        for s in json.loads(path.read_text())
    ]


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
    """Rows = methods, columns = target ε: ``mean ± std (z)``, a cell with fewer seeds
    than the most says how many."""
    epsilons = sorted({e for _, e in table if e is not None})
    lines = ["| method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |",
             "|---|" + "---|" * len(epsilons)]  # fmt: skip
    most = max((s["n"] for s in table.values()), default=0)
    for method in METHODS:
        cells = []
        for e in epsilons:
            stat = table.get((method.name, e))
            fewer = "" if stat is None or stat["n"] == most else f", {stat['n']} seed(s)"
            if stat is None:
                cells.append("—")
                continue
            cells.append(f"{stat['mean']:.3f} ± {stat['std']:.3f} (z {stat['z']:.2f}{fewer})")
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
    """What a cell's summary says beyond accuracy: DP-FTRL's participants per round (its
    block; before shuffled epochs, m less the clients already in the tree), adaptive
    clipping's final C, client budgets' rate q_i."""
    privacy = summary.get("privacy") or {}
    details: dict[str, float] = {}
    excluded = privacy.get("repeat_excluded_per_round")
    if excluded:
        m = float(privacy.get("num_sampled_clients", 0))
        details["participants/round"] = m - statistics.fmean(excluded)
    elif str(privacy.get("sampling", "")).startswith("shuffled epochs"):  # DP-FTRL
        details["participants/round"] = float(privacy["clients_per_round"])
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


READING = (
    "- Same number, different neighbouring relation: the DP-FedAvg and adaptive rows are "
    "replace-one (sum sensitivity 2C), DP-FTRL is replace-special (a client's contributions "
    "zeroed, sensitivity C per leaf), client budgets are Poisson add/remove. At equal ε a "
    "replace-one figure is the stronger promise, so this does not favour the DP-FedAvg rows.",
    "- Amplification: only the DP-FTRL row and the two DP-FedAvg no-amplification rows hold "
    "whoever controls or sees the sampling; fixed clipping, adaptive clipping and client "
    "budgets assume the server's sample is secret and as stated.",
    "- DP-FTRL here: shuffled epochs (a secret permutation of the 100 clients per epoch, 20 "
    "of it a round, every one asked) and one tree of 5 leaves per epoch (restart = 100 // 20 "
    "rounds), ftrl-momentum 0; the tree's gain over independent noise grows with the tree's "
    "length, so short trees mostly pay the tree depth.",
    "- Adaptive clipping needs z < 2σ_b; σ_b = 10 admits every z here, and with m = 20 the "
    "clipped-count noise (std σ_b/m = 0.5 on a fraction) lets C wander (final C below).",
    "- Client budgets: every client in one budget group (the target ε); the server's rate "
    "q_i is calibrated at fixed clipping's z, and Poisson add/remove accounting admits a "
    "larger expected sample (q_i·100, per-cell details) than 20 at that z, so its noise on "
    "the mean is smaller: its accuracy is not like-for-like with the replace-one rows.",
    "- Accuracy is the final round's on 180 test examples (one example = 0.0056); 20 rounds "
    "and hyper-parameters not tuned per method (C = 0.5 for every row, the adaptive row's "
    "initial C).",
)


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
            "Generated by `make privacy-utility` (`python -m bench.privacy_utility`) from "
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
            "## How to read it",
            "",
            *READING,
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
            "## Invocations (machine shared with other jobs; training at nice 19)",
            "",
            *session_lines(out),
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
    parser = argparse.ArgumentParser(description="Write the privacy-utility page and plot.")
    parser.add_argument("out", type=Path, help="the directory bench/privacy_utility.py ran into")
    parser.add_argument("--page", type=Path, default=Path("docs/results/privacy-utility.md"))
    parser.add_argument("--plot", type=Path, default=Path("docs/results/privacy-utility.png"))
    args = parser.parse_args(argv)
    print(report(args.out, args.page, args.plot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
