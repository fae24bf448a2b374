"""PNG plots (matplotlib, Agg backend): accuracy per round (with σ and ε), ROC curves."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedpriv.metrics import curve_auc  # noqa: E402
from fedpriv.reporting.records import RoundRecord  # noqa: E402
from fedpriv.reporting.runlog import from_json_number  # noqa: E402
from fedpriv.reporting.tables import integer_rounds, save_figure  # noqa: E402


def finite_points(points: Sequence[tuple[int, Any]]) -> list[tuple[int, float]]:
    """The (round, value) points whose value is a finite number (None / NaN / ±inf dropped)."""
    out = []
    for x, y in points:
        number = from_json_number(y)
        if number is not None and math.isfinite(number):
            out.append((int(x), number))
    return out


def plot_rounds(
    series: Mapping[str, Sequence[tuple[int, float]]],
    path: str | Path,
    *,
    ylabel: str,
    title: str = "",
    chance: float | None = None,
    legend_size: int = 8,
) -> Path:
    """One line per label of (round, value) points in [0, 1]; ``chance`` dashed if given.
    A label without a finite point draws nothing and gets no legend entry."""
    fig, ax = plt.subplots(figsize=(6, 4))
    _round_lines(ax, series)
    if chance is not None:
        ax.axhline(chance, ls="--", c="grey", lw=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    integer_rounds(ax)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=legend_size)
    return save_figure(fig, path)


# One marker and dash pattern per line, so lines that coincide (e.g. no DP and CDP, whose noise
# on the mean is tiny) stay distinguishable: the later line dashes over the earlier one's markers.
_MARKERS = ("o", "s", "^", "D", "v", "x", "P", "*")
_DASHES = ("-", "--", "-.", ":")


def _round_lines(ax: Any, series: Mapping[str, Sequence[tuple[int, Any]]], **style: Any) -> None:
    for i, (label, points) in enumerate(series.items()):
        finite = finite_points(points)
        if finite:
            xs, ys = zip(*finite)
            step = max(1, len(xs) // 20)  # markers staggered: coinciding lines show each one's
            look = {"marker": _MARKERS[i % len(_MARKERS)], "ls": _DASHES[i % len(_DASHES)],
                    "ms": 4, "mfc": "none",
                    "markevery": ((i * step) // max(1, len(series)), step)}  # fmt: skip
            ax.plot(xs, ys, label=label, **{**look, **style})


def plot_accuracy_per_round(
    series: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    title: str = "",
    privacy: Mapping[str, Sequence[tuple[int, Any]]] | None = None,
) -> Path:
    """Accuracy (y) against round 1..R (x) per label (MP Appendix B shape).

    ``privacy``: the noise std σ and the ε so far per round (e.g. ``{"σ": [(1, 0.02), ...],
    "ε": [(1, 0.8), ...]}``), drawn dashed on a second y axis (log scale) when any is given.
    """
    points = {label: list(enumerate(values, 1)) for label, values in series.items()}
    privacy = {k: finite_points(v) for k, v in (privacy or {}).items()}
    privacy = {k: v for k, v in privacy.items() if v}
    if not privacy:
        return plot_rounds(points, path, ylabel="accuracy", title=title)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    _round_lines(ax, points)
    ax.set_xlabel("round")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    twin = ax.twinx()
    for (label, pts), colour in zip(privacy.items(), ("tab:red", "tab:purple", "tab:brown")):
        xs, ys = zip(*pts)
        twin.plot(xs, ys, ls="--", marker="x", ms=4, c=colour, label=label)
    twin.set_ylabel(" and ".join(privacy))
    if all(y > 0 for pts in privacy.values() for _, y in pts):
        from matplotlib.ticker import FuncFormatter

        twin.set_yscale("log")
        plain = FuncFormatter(lambda value, _: f"{value:g}")
        twin.yaxis.set_major_formatter(plain)
        twin.yaxis.set_minor_formatter(plain)
    integer_rounds(ax)
    handles, labels = ax.get_legend_handles_labels()
    extra_handles, extra_labels = twin.get_legend_handles_labels()
    ax.legend(handles + extra_handles, labels + extra_labels, fontsize=8, loc="lower right")
    return save_figure(fig, path)


def plot_run_accuracy(rounds: Sequence[Mapping[str, Any]], path: str | Path, *, title: str) -> Path:
    """A run's ``accuracy.png``: server-test and distributed accuracy per round, with the
    round's σ and ε so far (:meth:`RoundRecord.sigma`, :meth:`RoundRecord.epsilon`) on a
    second axis; ``rounds``: the run's rounds.jsonl lines."""
    records = [RoundRecord.from_json(r) for r in rounds if int(r.get("round", 0)) > 0]
    series = {
        "server test": [r.metric("server", "accuracy") for r in records],
        "distributed": [r.metric("distributed", "accuracy") for r in records],
    }
    privacy = {
        "σ": [(r.round, r.sigma()) for r in records],
        "ε so far": [(r.round, r.epsilon()) for r in records],
    }
    return plot_accuracy_per_round(series, path, title=title, privacy=privacy)


def plot_roc(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
    path: str | Path,
    *,
    title: str = "",
    log_scale: bool = False,
) -> Path:
    """ROC curves, one per label, each with its AUC in the legend (MP Appendix C shape).

    ``log_scale=True`` draws both axes on a log scale from 1e-4 (Carlini et al.'s LiRA
    figures): the low-FPR region where a membership attack is confident becomes visible.
    """
    fig, ax = plt.subplots(figsize=(5, 5))
    for label, (fpr, tpr) in curves.items():
        ax.plot(fpr, tpr, label=f"{label} (AUC {curve_auc(fpr, tpr):.3f})")
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
