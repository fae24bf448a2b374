"""The small shared reporting helpers: Markdown tables, number formatting, saving a figure.

Every report (grid report, CIA / DLG / membership reports, zonal comparison, IFCA sweep
table) formats with these, so a table or a number looks the same everywhere. No matplotlib
import at module level: :func:`save_figure` closes the figure through ``pyplot`` lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.names import STRATEGIES
from fedpriv.privacy.modes import dp_sgd, global_dp, metric_dp, none

DASH = "—"
# the MP paper's columns, in its order: names and labels from the modes' own declarations
REPORTED_MODES = (none.MODE, global_dp.MODE, metric_dp.MODE, dp_sgd.MODE)
PRIVACY_ORDER = tuple(mode.name for mode in REPORTED_MODES)
PRIVACY_LABELS = {mode.name: mode.report_label for mode in REPORTED_MODES}
STRATEGY_ORDER = STRATEGIES
STRATEGY_LABELS = {
    "fedavg": "FedAvg",
    "fedavgm": "FedAvgM",
    "fedmedian": "FedMedian",
    "fedprox": "FedProx",
    "fedopt": "FedOpt",
    "fedyogi": "FedYogi",
}
FINAL_METRICS = (
    ("accuracy", "Accuracy"),
    ("f1_macro", "F1-macro"),
    ("precision_macro", "Precision-macro"),
    ("roc_auc_micro", "ROC-AUC"),
)
FPR_GRID = np.linspace(0.0, 1.0, 201)


def mean_std(values: Iterable[float]) -> tuple[float, float, int]:
    """Mean, population std (ddof 0) and count of the finite values (nan, nan, 0 if none)."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return float("nan"), float("nan"), 0
    return float(finite.mean()), float(finite.std()), int(finite.size)


def fmt_mean_std(values: Sequence[float], *, digits: int = 3, empty: str = DASH) -> str:
    """``"0.929 ± 0.008"`` over the finite values; ``empty`` when there are none."""
    mean, std, n = mean_std(values)
    if n == 0:
        return empty
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def fmt_value(value: float | None) -> str:
    """A privacy figure: 3 significant digits, "inf", or "—"."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if math.isinf(value):
        return "inf"
    return f"{value:.3g}"


def markdown_table(
    header: Sequence[Any],
    rows: Sequence[Sequence[Any]],
    *,
    align: str = ":---:",
    cell: Callable[[Any], str] = str,
) -> str:
    """A GitHub Markdown table: first column left-aligned, the others ``align``-ed."""
    lines = [
        "| " + " | ".join(str(h) for h in header) + " |",
        "|" + "|".join([":---"] + [align] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def integer_rounds(ax: Any) -> None:
    """Round ticks on integers only (never 1.25, 1.75) on a figure's x axis."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def save_figure(fig: Any, path: str | Path, *, layout: Any = True) -> Path:
    """``tight_layout`` (``layout``: True, a rect, or False), save at 110 dpi, close."""
    import matplotlib.pyplot as plt

    if layout is True:
        fig.tight_layout()
    elif layout:
        fig.tight_layout(rect=layout)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
