"""The distributed-DP utility page of ``bench/distributed_utility.py`` runs: final accuracy
against ε for distributed DP at 16 bits a coordinate, central ``global-dp`` and client-level
LDP at the same ε, same expected clients per round and (distributed vs central) the same
relation. Tables are mean ± std over seeds; the plot has ±1 std bands and its legend below
the axes, outside the data."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.distributed_noise import noise_lines
from bench.distributed_utility import (
    CENTRAL,
    DISTRIBUTED_16,
    DISTRIBUTED_16_CENTRAL_Z,
    LDP,
    METHODS,
)
from bench.privacy_utility import BASE, Method
from bench.privacy_utility_page import (
    _band,
    aggregate,
    epsilons_of,
    reported_epsilon,
    session_lines,
    stat_text,
    summaries,
)
from bench.results_page import provenance

Table = Mapping[tuple[str, float | None], Mapping[str, Any]]
WITHIN = 0.03  # the goal: distributed DP's mean within this of central DP's at 16 bits
COMMAND = "make distributed-dp-utility"


def ldp_epsilon(summary: Mapping[str, Any]) -> float | None:
    """LDP's ε against the server: the zonal block's ``against_zone_node`` LDP headline (one
    zone in the ServerApp: the server sees each noised update)."""
    zonal = (summary.get("zonal") or {}).get("epsilon") or {}
    ldp = ((zonal.get("against_zone_node") or {}).get("epsilon") or {}).get("ldp") or {}
    value = ldp.get("pld")
    return float(value) if isinstance(value, int | float) else None


def read_cells(out: Path) -> list[dict[str, Any]]:
    """One row per finished cell: method, ε target, seed, accuracy, z, reported ε, wall."""
    rows = []
    for method in METHODS:
        for epsilon, seed, summary in summaries(out, method):
            reported = reported_epsilon(summary)
            rows.append({
                "method": method.name, "epsilon": epsilon, "seed": seed,
                "accuracy": float(summary["final"]["accuracy"]),
                "z": summary["run_config"].get("noise-multiplier"),
                "reported_epsilon": reported if reported is not None else ldp_epsilon(summary),
                "wall_s": summary.get("wall_seconds"),
                "rounds": summary["run_config"].get("num-server-rounds"),
            })  # fmt: skip
    return rows


def rounds_of(rows: Sequence[Mapping[str, Any]]) -> int:
    """The cells' rounds (the page's setting when no cell says)."""
    found = {int(r["rounds"]) for r in rows if r.get("rounds") is not None}
    return max(found, default=int(BASE["num-server-rounds"]))


def results_table(table: Table, methods: Sequence[Method]) -> str:
    """Markdown: one row per method, one column per target ε."""
    epsilons = epsilons_of(table)
    most = max((s["n"] for s in table.values()), default=0)
    head = "| method | " + " | ".join(f"ε = {e:g}" for e in epsilons) + " |"
    rule = "|---|" + "---|" * len(epsilons)
    rows = [
        f"| {m.name} | " + " | ".join(stat_text(table.get((m.name, e)), most) for e in epsilons)
        + " |"
        for m in methods
    ]  # fmt: skip
    return "\n".join([head, rule, *rows])


def gap_lines(table: Table) -> list[str]:
    """Per ε: distributed DP − central DP (against WITHIN) and distributed DP − LDP."""
    lines = []
    for e in epsilons_of(table):
        dist, cent, ldp = (table.get((m.name, e)) for m in (DISTRIBUTED_16, CENTRAL, LDP))
        if dist is None or cent is None:
            lines.append(f"- ε = {e:g}: not both distributed and central DP ran")
            continue
        gap = dist["mean"] - cent["mean"]
        within = "within" if abs(gap) <= WITHIN else "**not** within"
        text = f"- ε = {e:g}: distributed − central = {gap:+.3f} ({within} {WITHIN:g})"
        if ldp is not None:
            above = "above" if dist["mean"] > ldp["mean"] else "**not** above"
            text += f"; distributed − LDP = {dist['mean'] - ldp['mean']:+.3f} ({above} LDP)"
        seeds = f"seeds {dist['seeds']} vs {cent['seeds']}"
        lines.append(f"{text} ({seeds})")
        same_z = table.get((DISTRIBUTED_16_CENTRAL_Z.name, e))
        if same_z is not None:
            lines.append(
                f"  - at central DP's z (equal noise, ε above the target): distributed − "
                f"central = {same_z['mean'] - cent['mean']:+.3f} (seeds {same_z['seeds']})"
            )
    return lines


def reported_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The largest ε each (method, target) reported over its seeds."""
    worst: dict[tuple[str, float], float] = {}
    for r in rows:
        if r["reported_epsilon"] is not None:
            key = (r["method"], r["epsilon"])
            worst[key] = max(worst.get(key, 0.0), r["reported_epsilon"])
    return [f"- {m} at ε = {e:g}: reported {v:.3f}" for (m, e), v in sorted(worst.items())]


def plot(table: Table, path: Path) -> Path:
    """Accuracy against ε (log2 axis, ±1 std bands); the legend below the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    styles = ({"ls": "-"}, {"ls": "--"}, {"ls": ":"}, {"ls": "-."})
    for method, style in zip(METHODS, styles):
        _band(ax, table, method.name, method.name, **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("target ε (δ = 1e-5), against the server")
    ax.set_ylabel("final test accuracy")
    ax.set_title("digits, 100 IID clients, 20 a round (expected), 20 rounds")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=1, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def cell_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Which (method, ε) cells the page holds, with their seeds."""
    held: dict[tuple[str, float], list[int]] = {}
    for r in rows:
        held.setdefault((r["method"], r["epsilon"]), []).append(int(r["seed"]))
    return [f"- {m}, ε = {e:g}: seeds {sorted(s)}" for (m, e), s in sorted(held.items())]


def report(out: Path, page: Path, plot_path: Path) -> str:
    """Write the page and the plot of the cells under ``out``; return the page's text."""
    rows = read_cells(out)
    table = aggregate(rows)
    plot(table, plot_path)
    wall = sum(float(r["wall_s"] or 0.0) for r in rows)
    seeds = sorted({int(r["seed"]) for r in rows})
    text = "\n".join([
        "# Distributed DP's utility: accuracy against ε (digits, 100 clients)",
        "",
        provenance(COMMAND),
        "",
        "`python -m bench.distributed_utility` ran the cells, "
        f"`python -m bench.distributed_utility_page` wrote this page: {len(rows)} runs (seeds "
        f"{', '.join(map(str, seeds))}; summed cell wall time {wall / 60:.1f} min).",
        "",
        "Setting: " + ", ".join(f"{k} = {v}" for k, v in BASE.items()) + ", δ = 1e-5 (the "
        "[privacy-utility page](privacy-utility.md)'s). Every cell runs at the smallest z "
        "whose ε, by its own mode's accountant, meets the target (the planner: `fedpriv "
        "epsilon --target-epsilon`), except the diagnostic row at central DP's z (its ε is "
        "above the target). Every ε here holds against the server.",
        "",
        f"![accuracy against ε]({plot_path.name})",
        "",
        "Final test accuracy, mean ± std over seeds (z of the cell):",
        "",
        results_table(table, METHODS),
        "",
        "## Distributed DP against central DP and LDP, same ε",
        "",
        *gap_lines(table),
        "",
        "## What each ε covers",
        "",
        *[f"- **{m.name}** (`{m.mode}`): {m.covers}." for m in METHODS],
        "",
        "Distributed and central DP: the same relation (one client's update present or absent "
        "from a sum divided by the fixed 20; for central DP's fixed-denominator Poisson sum, "
        "add/remove equals replacing the update by zero), the same q = 0.2 and 20 expected "
        "clients a round; their z are not on one scale (central: noise std on the sum / C; "
        "distributed: / B, the integer sensitivity of the rotated, rounded update; B = "
        "1.005·γC here, so the two scales nearly agree). LDP is replace-one and not "
        "amplified: the server picks the cohort and sees each noised update.",
        "",
        "## Why distributed DP needs more noise at the same ε",
        "",
        *noise_lines(
            epsilons_of(table), rounds_of(rows),
            {e: table.get((DISTRIBUTED_16.name, e)) for e in epsilons_of(table)},
            {e: table.get((CENTRAL.name, e)) for e in epsilons_of(table)},
        ),  # fmt: skip
        "",
        "## ε reported by the runs (largest over seeds)",
        "",
        *reported_lines(rows),
        "",
        "## Cells this page holds",
        "",
        f"The full grid is {len(METHODS)} methods × ε ∈ {{2, 4, 8}} × seeds {{0, 1, 2}} "
        f"({len(METHODS) * 9} cells); this page holds {len(rows)}:",
        "",
        *cell_lines(rows),
        "",
        "## Invocations (machine shared with other jobs)",
        "",
        *session_lines(out),
        "",
    ])  # fmt: skip
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the distributed-DP utility page.")
    parser.add_argument("out", type=Path, help="the directory distributed_utility ran into")
    parser.add_argument("--page", type=Path, default=Path("docs/results/distributed-dp-utility.md"))
    parser.add_argument("--plot", type=Path, default=None, help="default: the page's .png")
    args = parser.parse_args(argv)
    print(report(args.out, args.page, args.plot or args.page.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
