"""Plots of the grid report (MP App. B, C; Fig. B.2): accuracy per round and ROC curves."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedpriv.grid import Groups, RunResult  # noqa: E402
from fedpriv.metrics import curve_auc, micro_roc_curve  # noqa: E402
from fedpriv.reporting.tables import (  # noqa: E402
    FPR_GRID,
    PRIVACY_LABELS,
    STRATEGY_LABELS,
    fmt_mean_std,
    integer_rounds,
    save_figure,
)


def _mean_series(
    runs: Sequence[RunResult], source: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-round mean, min and max over seeds (rounds present in every seed)."""
    series = [r.series(source) for r in runs]
    series = [s for s in series if s and any(math.isfinite(v) for v in s)]
    if not series:
        return np.array([]), np.array([]), np.array([])
    length = min(len(s) for s in series)
    stack = np.asarray([s[:length] for s in series], dtype=float)
    with np.errstate(all="ignore"):
        return np.nanmean(stack, 0), np.nanmin(stack, 0), np.nanmax(stack, 0)


def plot_strategy_accuracy(
    groups: Groups, strategy: str, modes: Sequence[str], path: Path
) -> Path | None:
    """MP App. B per strategy: accuracy per round, one line per privacy mode."""
    sources = [("server", "server test set"), ("distributed", "clients' test sets")]
    panels = [
        (s, t)
        for s, t in sources
        if any(_mean_series(groups.get((strategy, m), []), s)[0].size for m in modes)
    ]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (source, title) in zip(axes[0], panels):
        for mode in modes:
            mean, low, high = _mean_series(groups.get((strategy, mode), []), source)
            if mean.size == 0:
                continue
            x = np.arange(1, mean.size + 1)
            (line,) = ax.plot(x, mean, marker="o", ms=3, label=PRIVACY_LABELS.get(mode, mode))
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.15, lw=0)
        ax.set_xlabel("round")
        integer_rounds(ax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.set_title(f"{STRATEGY_LABELS.get(strategy, strategy)}: {title}")
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_accuracy_by_privacy(
    groups: Groups,
    strategies: Sequence[str],
    modes: Sequence[str],
    path: Path,
    *,
    source: str = "server",
) -> Path | None:
    """MP Fig. B.2 layout: one panel per privacy mode, one line per strategy."""
    if not modes:
        return None
    fig, axes = plt.subplots(1, len(modes), figsize=(4.5 * len(modes), 4), squeeze=False)
    drawn = False
    for ax, mode in zip(axes[0], modes):
        for strategy in strategies:
            mean, _, _ = _mean_series(groups.get((strategy, mode), []), source)
            if mean.size:
                ax.plot(
                    np.arange(1, mean.size + 1),
                    mean,
                    marker="o",
                    ms=3,
                    label=STRATEGY_LABELS.get(strategy, strategy),
                )
                drawn = True
        ax.set_title(PRIVACY_LABELS.get(mode, mode))
        ax.set_xlabel("round")
        integer_rounds(ax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if not drawn:
        plt.close(fig)
        return None
    return save_figure(fig, path)


def mean_roc(runs: Sequence[RunResult]) -> tuple[np.ndarray, list[float]] | None:
    """Micro-averaged ROC: TPR averaged over seeds on ``FPR_GRID``, and per-seed AUCs."""
    tprs, aucs = [], []
    for run in runs:
        predictions = run.predictions()
        if predictions is None:
            continue
        fpr, tpr = micro_roc_curve(*predictions)
        tprs.append(np.interp(FPR_GRID, fpr, tpr))
        aucs.append(curve_auc(fpr, tpr))
    if not tprs:
        return None
    mean_tpr = np.mean(tprs, axis=0)
    mean_tpr[0] = 0.0
    return mean_tpr, aucs


def plot_strategy_roc(
    groups: Groups, strategy: str, modes: Sequence[str], path: Path
) -> Path | None:
    """MP App. C per strategy: micro-averaged ROC, one curve per privacy mode."""
    fig, ax = plt.subplots(figsize=(5, 5))
    drawn = False
    for mode in modes:
        roc = mean_roc(groups.get((strategy, mode), []))
        if roc is None:
            continue
        tpr, aucs = roc
        ax.plot(FPR_GRID, tpr, label=f"{PRIVACY_LABELS.get(mode, mode)} (AUC {fmt_mean_std(aucs)})")
        drawn = True
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=0.8)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(f"{STRATEGY_LABELS.get(strategy, strategy)}: micro-averaged ROC")
    ax.legend(fontsize=8, loc="lower right")
    if not drawn:
        plt.close(fig)
        return None
    return save_figure(fig, path)
