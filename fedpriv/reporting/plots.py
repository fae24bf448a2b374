"""PNG plots (matplotlib, Agg backend): accuracy per round, ROC curves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedpriv.reporting.tables import save_figure  # noqa: E402


def plot_rounds(
    series: Mapping[str, Sequence[tuple[int, float]]],
    path: str | Path,
    *,
    ylabel: str,
    title: str = "",
    chance: float | None = None,
    legend_size: int = 8,
) -> Path:
    """One line per label of (round, value) points in [0, 1]; ``chance`` dashed if given."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, points in series.items():
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", ms=3, label=label)
    if chance is not None:
        ax.axhline(chance, ls="--", c="grey", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(fontsize=legend_size)
    return save_figure(fig, path)


def plot_accuracy_per_round(
    series: Mapping[str, Sequence[float]], path: str | Path, *, title: str = ""
) -> Path:
    """One line per label: accuracy (y) against round 1..R (x) (MP Appendix B shape)."""
    points = {label: list(enumerate(values, 1)) for label, values in series.items()}
    return plot_rounds(points, path, ylabel="accuracy", title=title)


def plot_roc(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    *,
    title: str = "",
    log_scale: bool = False,
) -> Path:
    """ROC curves, one per label (MP Appendix C shape).

    ``log_scale=True`` draws both axes on a log scale from 1e-4 (Carlini et al.'s LiRA
    figures): the low-FPR region where a membership attack is confident becomes visible.
    """
    fig, ax = plt.subplots(figsize=(5, 5))
    for label, (fpr, tpr) in curves.items():
        ax.plot(fpr, tpr, label=label)
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=0.8)
    if log_scale:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(1e-4, 1)
        ax.set_ylim(1e-4, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_zonal_sweep(rows: list[dict], path: Path) -> None:
    """HDP Fig. 3 shape: final accuracy against ε at the aggregator, one point per s."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for placement in sorted({r["placement"] for r in rows}):
        pts = [
            r
            for r in rows
            if r["placement"] == placement and math.isfinite(r["epsilon_aggregator_rdp"])
        ]
        if not pts:
            continue
        for key, style in (("epsilon_aggregator_rdp", "o-"), ("epsilon_heuristic_rdp", "s--")):
            xs = [r[key] for r in pts]
            ax.plot(
                xs,
                [r["last3_accuracy"] for r in pts],
                style,
                label=f"{placement} ({'accountant' if 'aggregator' in key else 'heuristic'})",
            )
        for r in pts:
            ax.annotate(
                f"s={r['num_zones']}",
                (r["epsilon_aggregator_rdp"], r["last3_accuracy"]),
                fontsize=7,
            )
    ax.set_xscale("log")
    ax.set_xlabel("ε at the aggregator (RDP)")
    ax.set_ylabel("accuracy (mean of last 3 rounds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)
