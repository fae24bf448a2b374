"""The zonal comparison report: accuracy per round (HDP Fig. 2), ε at the aggregator (HDP
Table III) and accuracy against ε over numbers of zones (HDP Fig. 3)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from fedpriv.scenarios.zonal.keys import clients_per_round, parse_zone_counts

from fedpriv.reporting.runlog import RunLog


def _fmt(x: Any) -> str:
    if isinstance(x, str):
        return x
    if x is None or (isinstance(x, float) and math.isinf(x)):
        return "inf"
    if isinstance(x, float) and (abs(x) >= 1e4 or (abs(x) < 1e-3 and x != 0)):
        return f"{x:.3g}"
    return f"{x:.3f}" if isinstance(x, float) else str(x)


def run_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The comparison-table row of one run."""
    cfg = summary["config"]
    accs = summary["accuracy_per_round"]
    eps = summary.get("zonal", {}).get("epsilon", {})
    agg = eps.get("aggregator_accountant", {})
    heur = eps.get("aggregator_heuristic", {})
    level = eps.get("level", {})
    curious = eps.get("vs_curious_aggregator", {})
    return {
        "run": summary["label"],
        "placement": cfg["noise-placement"],
        "num_zones": cfg["num-zones"],
        "table_i": eps.get("table_i", "none"),
        "final_accuracy": summary["final"]["accuracy"],
        "last3_accuracy": float(np.mean(accs[-3:])) if accs else math.nan,
        "aggregator_noise_multiplier": eps.get("aggregator_noise_multiplier", 0.0),
        "epsilon_level_rdp": level.get("rdp", math.inf),
        "epsilon_aggregator_pld": agg.get("pld", math.inf),
        "epsilon_aggregator_rdp": agg.get("rdp", math.inf),
        "epsilon_heuristic_rdp": heur.get("rdp", math.inf),
        "epsilon_vs_curious_aggregator_rdp": {k: v.get("rdp") for k, v in curious.items()},
        "epsilon_vs_zone_node_rdp": {
            k: v.get("rdp") for k, v in eps.get("against_zone_node", {}).get("epsilon", {}).items()
        },
        "zonal_secagg": bool(cfg.get("zonal-secagg", False)),
        "reelections": summary.get("zonal", {}).get("reelections", 0),
        "rounds_aggregated": f"{summary.get('rounds_aggregated', 0)}/{len(accs)}",
        "wall_seconds": summary.get("wall_seconds", math.nan),
    }


def report_markdown(
    cfg: Mapping[str, Any], rows: list[dict], summaries: list[dict], wall: float
) -> str:
    """report.md: setup, accuracy per round (Fig. 2), ε at the aggregator (Table III)."""
    k, n = clients_per_round(cfg), int(cfg["num-clients"])
    lines = [
        f"# Zonal (hierarchical) FL with DP: {cfg['scenario']}",
        "",
        f"{n} clients ({cfg['dataset']}, partition {cfg['partition']}), k = {k} sampled per "
        f"round (q = {k / n:g}), {cfg['num-server-rounds']} rounds, {cfg['strategy']} + "
        f"{cfg['optimizer']} lr {cfg['learning-rate']}, {cfg['local-epochs']} local epochs, "
        f"batch {cfg['batch-size']}, model {cfg['model']}; z = {cfg['noise-multiplier']}"
        f", C = {cfg['clipping-norm']}, delta = {cfg['dp-delta']}, zone assignment "
        f"{cfg['zone-assignment']}, weighting {cfg['zone-weighting']}, seed {cfg['seed']}. "
        f"Same seed and client samples in every run. Total wall time {wall:.0f} s.",
        "",
        "## Server test accuracy per round (HDP Fig. 2): `comparison.png`",
        "",
    ]
    width = max(len(s["accuracy_per_round"]) for s in summaries)
    lines.append("| round | " + " | ".join(r["run"] for r in rows) + " |")
    lines.append("|---" * (len(rows) + 1) + "|")
    for t in range(width):
        vals = [
            s["accuracy_per_round"][t] if t < len(s["accuracy_per_round"]) else math.nan
            for s in summaries
        ]
        lines.append(f"| {t + 1} | " + " | ".join(_fmt(v) for v in vals) + " |")
    lines += [
        "",
        "## Accuracy and ε at the aggregator after the last round (HDP Table III)",
        "",
        "| run | s | Table I | final acc | mean acc last 3 | aggregate z | ε level (RDP) "
        "| ε aggregator, accountant PLD / RDP | ε aggregator, HDP §IV-C heuristic (RDP) "
        "| ε vs curious aggregator (RDP) | re-elections | rounds aggregated | wall s |",
        "|---" * 13 + "|",
    ]
    for r in rows:
        curious = (
            ", ".join(f"{k}: {_fmt(v)}" for k, v in r["epsilon_vs_curious_aggregator_rdp"].items())
            or "-"
        )
        lines.append(
            f"| {r['run']} | {r['num_zones']} | {r['table_i']} | {_fmt(r['final_accuracy'])} | "
            f"{_fmt(r['last3_accuracy'])} | {_fmt(r['aggregator_noise_multiplier'])} | "
            f"{_fmt(r['epsilon_level_rdp'])} | {_fmt(r['epsilon_aggregator_pld'])} / "
            f"{_fmt(r['epsilon_aggregator_rdp'])} | {_fmt(r['epsilon_heuristic_rdp'])} | "
            f"{curious} | {r['reelections']} | {r['rounds_aggregated']} | "
            f"{_fmt(r['wall_seconds'])} |"
        )
    if len({r["num_zones"] for r in rows}) > 1:
        lines += ["", "Accuracy against ε at the aggregator as s varies (HDP Fig. 3): `sweep.png`."]
    eps = next(
        (
            s["zonal"]["epsilon"]
            for s in summaries
            if s.get("zonal", {}).get("epsilon", {}).get("table_i", "none") != "none"
        ),
        None,
    )
    lines += ["", "## What the ε figures assume", ""]
    if eps:
        lines += [eps["assumptions"], "", "Accountant: " + eps["accountant_note"]]
    lines += _against_lines(summaries)
    lines += _zone_node_lines(rows)
    return "\n".join(lines) + "\n"


def _against_lines(summaries: list[dict]) -> list[str]:
    """Whom each placement's ε protects against (``epsilon-against`` of the runs)."""
    against: dict[str, str] = {}
    for s in summaries:
        against.update(s.get("zonal", {}).get("epsilon", {}).get("epsilon-against", {}))
    if not against:
        return []
    lines = ["", "## Against whom each ε holds", ""]
    return lines + [f"- {level.upper()}: {text}" for level, text in sorted(against.items())]


def write_compare_outputs(cfg, summaries: list[dict], out: Path, wall: float, top: RunLog):
    """report.md, comparison.png, sweep.png (if a sweep) and the top-level summary.json."""
    from fedpriv.reporting.plots import plot_accuracy_per_round, plot_zonal_sweep

    rows = [run_row(s) for s in summaries]
    title = f"{cfg['scenario']}: accuracy per round, z = {cfg['noise-multiplier']}"
    plot_accuracy_per_round(
        {s["label"]: s["accuracy_per_round"] for s in summaries},
        out / "comparison.png",
        title=title,
    )
    if parse_zone_counts(cfg["zonal-sweep-zones"], int(cfg["num-clients"])):
        plot_zonal_sweep(rows, out / "sweep.png")
    (out / "report.md").write_text(report_markdown(cfg, rows, summaries, wall))
    top.write_summary(
        {
            "scenario": cfg["scenario"],
            "seed": cfg["seed"],
            "config": dict(cfg),
            "final": {r["run"]: r["final_accuracy"] for r in rows},
            "runs": rows,
            "wall_seconds": wall,
        }
    )


def _zone_node_lines(rows: list[dict]) -> list[str]:
    """ε against the zone node per run (``against_zone_node``; HDP §IV's secure aggregation
    inside zones when ``zonal-secagg``)."""
    noised = [r for r in rows if r["epsilon_vs_zone_node_rdp"]]
    if not noised:
        return []
    lines = ["", "## ε against the zone node (RDP; HDP §IV, `zonal-secagg`)", ""]
    for r in noised:
        figures = ", ".join(f"{k}: {_fmt(v)}" for k, v in r["epsilon_vs_zone_node_rdp"].items())
        secagg = "secure aggregation in zones" if r["zonal_secagg"] else "no secure aggregation"
        lines.append(f"- {r['run']} ({secagg}): {figures}")
    return lines
