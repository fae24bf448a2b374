"""Markdown tables and PNGs of the attacks, in the papers' report shapes.

- CIA: one table per strategy in the shape of MP Tables 9, 10, D.13–D.16 (rows Aggregated /
  Target / Difference (%), columns Vanilla FL / Global-DP / Metric-privacy), a strategies ×
  privacy summary of the difference, MP Table 11 (round-1 test loss), and what MP lacks: the
  same numbers with the target absent and the loss-threshold AUC per round.
- DLG: GP Fig. 5 as a table (rows ν) and HDP Table IV (columns LDP / HDP / CDP / No DP), with
  MSE / PSNR / SSIM, and PNGs of the reconstructions next to the originals.
- Membership inference: AUC and advantage, strategies × privacy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedpriv.privacy.modes.registry import selected  # noqa: E402
from fedpriv.reporting import tables as reporting  # noqa: E402
from fedpriv.reporting.tables import (  # noqa: E402
    PRIVACY_LABELS,
    STRATEGY_LABELS,
    integer_rounds,
    save_figure,
)

# Table labels are shared with the grid report (one place for the names).
# MP's CIA tables per strategy. Table 10 is captioned "FedYogi" but MP's text presents it as
# the FedOpt result, and Table D.16 (FedYogi) has different numbers: we read Table 10 as FedOpt.
MP_TABLE = {
    "fedavg": "Table 9",
    "fedopt": "Table 10",
    "fedavgm": "Table D.13",
    "fedmedian": "Table D.14",
    "fedprox": "Table D.15",
    "fedyogi": "Table D.16",
}


# MP's published CIA numbers (Alzheimer MRI, one run): Difference (%) per strategy, columns
# Vanilla FL / Global-DP / Metric-privacy (Tables 9, 10, D.13-D.16), and the round-1 test loss
# (Table 11). For reference next to ours; synthetic-mri is a pipeline stand-in, not the data.
MP_PUBLISHED_DIFFERENCE = {
    "fedavg": (12.719, 25.679, 24.631),
    "fedavgm": (19.782, 13.105, 21.965),
    "fedmedian": (10.129, 28.587, 25.888),
    "fedprox": (12.719, 31.173, 24.820),
    "fedopt": (0.598, 7.936, 11.320),
    "fedyogi": (11.150, 18.861, 14.888),
}
MP_PUBLISHED_TEST_LOSS = {
    "fedavg": (1.010, 3.514, 1.106),
    "fedavgm": (0.993, 1.048, 1.041),
    "fedmedian": (1.046, 2.071, 1.387),
    "fedprox": (1.010, 1.744, 1.149),
    "fedopt": (0.645, 0.845, 0.823),
    "fedyogi": (0.870, 1.036, 0.902),
}


def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers with ``digits`` decimals, None/NaN as "n/a"."""
    if value is None:
        return "n/a"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if math.isnan(value):
            return "n/a"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{float(value):.{digits}f}"
    return str(value)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3) -> str:
    """A GitHub Markdown table (first column left-aligned, the others right-aligned)."""
    return reporting.markdown_table(header, rows, align="---:", cell=lambda c: fmt(c, digits))


def _label(mapping: Mapping[str, str], key: str) -> str:
    return mapping.get(key, key)


def _ordered(keys: Sequence[str], order: Sequence[str]) -> list[str]:
    return [k for k in order if k in keys] + sorted(k for k in keys if k not in order)


# --- CIA -----------------------------------------------------------------------------------


def _round(cell: Mapping[str, Any], phase: str, r: int) -> dict[str, Any]:
    for rec in cell.get(phase) or []:
        if rec.get("round") == r:
            return rec
    return {}


def cia_report(
    cells: Sequence[Mapping[str, Any]], *, title: str = "Client inference attack"
) -> str:
    """Markdown for a grid of CIA runs.

    Each cell: ``strategy``, ``privacy``, ``present`` and ``absent`` (lists of per-round dicts
    with ``round``, ``loss_aggregated``, ``loss_shadow``, ``difference_pct``, ``auc``,
    ``advantage``, ``test_loss``; ``absent`` may be empty), and optionally ``info`` (dataset,
    cia_reading, n_shadow, ...) and ``wall_seconds``.
    """
    strategies = _ordered({c["strategy"] for c in cells}, list(STRATEGY_LABELS))
    privacies = _ordered({selected(c) for c in cells}, list(PRIVACY_LABELS))
    by = {(c["strategy"], selected(c)): c for c in cells}
    cols = [_label(PRIVACY_LABELS, p) for p in privacies]
    out = [f"# {title}", ""]
    info = next((c.get("info") for c in cells if c.get("info")), {}) or {}
    for key in (
        "dataset",
        "partition",
        "attacker",
        "target",
        "shadow_fraction",
        "n_shadow",
        "n_nonmember",
        "local_epochs",
        "seed",
    ):
        if key in info:
            out.append(f"- {key.replace('_', ' ')}: {info[key]}")
    if info.get("cia_reading"):
        out.append(f"- MP Table 8 reading: {info['cia_reading']}")
    out += [
        "- Difference (%) = (loss_shadow − loss_aggregated) / loss_shadow × 100 on the global "
        "model after round 1 (MP §7.4); Aggregated = the server's weighted aggregate of the "
        "clients' test-split losses; Target = the loss on the attacker's shadow set of the "
        "target. Target absent = the same run without the target (not in MP).",
        "- AUC = loss-threshold membership AUC of the shadow set (members) vs the target's "
        "held-out test split (non-members); 0.5 = no information (not in MP). TPR@1%FPR = the "
        "largest true-positive rate at a false-positive rate <= 1 % (Carlini et al.'s low-FPR "
        "measure; resolution 1/non-members).",
        "",
    ]
    out += ["## Relative difference (%) after round 1, target present (absent)", ""]
    rows = []
    for s in strategies:
        row: list[Any] = [_label(STRATEGY_LABELS, s)]
        for p in privacies:
            cell = by.get((s, p))
            if cell is None:
                row.append("n/a")
                continue
            pres = _round(cell, "present", 1).get("difference_pct")
            absn = _round(cell, "absent", 1).get("difference_pct")
            row.append(f"{fmt(pres)} ({fmt(absn)})" if cell.get("absent") else fmt(pres))
        rows.append(row)
    out += [markdown_table(["Strategy", *cols], rows), ""]
    out += ["## Test loss in the first round (MP Table 11 shape)", ""]
    rows = [
        [_label(STRATEGY_LABELS, s)]
        + [
            _round(by[(s, p)], "present", 1).get("test_loss") if (s, p) in by else None
            for p in privacies
        ]
        for s in strategies
    ]
    out += [markdown_table(["Strategy", *cols], rows), ""]
    for s in strategies:
        out += [f"## {_label(STRATEGY_LABELS, s)} (MP {MP_TABLE.get(s, '')} shape)", ""]
        spec = [
            ("Aggregated", "present", "loss_aggregated"),
            ("Target", "present", "loss_shadow"),
            ("Difference (%)", "present", "difference_pct"),
            ("Aggregated, target absent", "absent", "loss_aggregated"),
            ("Target, target absent", "absent", "loss_shadow"),
            ("Difference (%), target absent", "absent", "difference_pct"),
            ("AUC round 1, present", "present", "auc"),
            ("AUC round 1, absent", "absent", "auc"),
        ]
        rows = []
        for label, phase, key in spec:
            values = [
                _round(by[(s, p)], phase, 1).get(key) if (s, p) in by else None for p in privacies
            ]
            if phase == "absent" and all(v is None for v in values):
                continue
            rows.append([label, *values])
        out += [markdown_table(["Client", *cols], rows), ""]
    out += ["## Loss-threshold AUC per round (shadow vs held-out), present / absent", ""]
    rows = []
    for s in strategies:
        for p in privacies:
            cell = by.get((s, p))
            if cell is None:
                continue
            for rec in cell.get("present") or []:
                r = rec.get("round")
                absent = _round(cell, "absent", r)
                rows.append(
                    [
                        _label(STRATEGY_LABELS, s),
                        _label(PRIVACY_LABELS, p),
                        r,
                        rec.get("auc"),
                        absent.get("auc"),
                        rec.get("advantage"),
                        absent.get("advantage"),
                        rec.get("auc_all_members"),
                        absent.get("auc_all_members"),
                        rec.get("tpr_at_1pct_fpr"),
                        absent.get("tpr_at_1pct_fpr"),
                        rec.get("tpr_at_1pct_fpr_all_members"),
                        absent.get("tpr_at_1pct_fpr_all_members"),
                    ]
                )
    out += [
        markdown_table(
            [
                "Strategy",
                "Privacy",
                "Round",
                "AUC present",
                "AUC absent",
                "Adv. present",
                "Adv. absent",
                "AUC all members present",
                "AUC all members absent",
                "TPR@1%FPR present",
                "TPR@1%FPR absent",
                "TPR@1%FPR all members present",
                "TPR@1%FPR all members absent",
            ],
            rows,
        ),
        "",
    ]
    out += ["## MP's published numbers (Alzheimer MRI), for reference", ""]
    mp_cols = list(reporting.PRIVACY_ORDER[:3])  # the CIA table of the MP paper: no DP-SGD
    rows = [
        [_label(STRATEGY_LABELS, s), *MP_PUBLISHED_DIFFERENCE[s], *MP_PUBLISHED_TEST_LOSS[s]]
        for s in strategies
        if s in MP_PUBLISHED_DIFFERENCE
    ]
    out += [
        markdown_table(
            ["Strategy"]
            + [f"Difference (%) {_label(PRIVACY_LABELS, p)}" for p in mp_cols]
            + [f"Test loss {_label(PRIVACY_LABELS, p)}" for p in mp_cols],
            rows,
        ),
        "",
    ]
    walls = [c.get("wall_seconds") for c in cells if c.get("wall_seconds") is not None]
    if walls:
        out.append(f"Wall time: {sum(walls):.0f} s over {len(walls)} runs.")
    return "\n".join(out) + "\n"


def plot_auc_over_rounds(
    series: Mapping[str, Sequence[tuple[int, float]]], path: str | Path, *, title: str = ""
) -> Path:
    """One line per label: loss-threshold AUC (y) per round (x); 0.5 dashed."""
    from fedpriv.reporting.plots import plot_rounds

    return plot_rounds(
        series, path, ylabel="loss-threshold AUC", title=title, chance=0.5, legend_size=7
    )


def plot_cia_auc(cells: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """One panel per strategy: AUC per round, a colour per privacy mode, solid = target
    present, dashed = target absent; 0.5 dotted."""
    strategies = _ordered({c["strategy"] for c in cells}, list(STRATEGY_LABELS))
    privacies = _ordered({selected(c) for c in cells}, list(PRIVACY_LABELS))
    colours = {p: f"C{i}" for i, p in enumerate(privacies)}
    ncol = min(3, len(strategies))
    nrow = math.ceil(len(strategies) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.2 * ncol, 2.6 * nrow + 0.5), squeeze=False)
    for ax in axes.flat[len(strategies) :]:
        ax.axis("off")
    by = {(c["strategy"], selected(c)): c for c in cells}
    for ax, s in zip(axes.flat, strategies):
        for p in privacies:
            cell = by.get((s, p))
            for phase, style in (("present", "-"), ("absent", "--")):
                recs = (cell or {}).get(phase) or []
                if recs:
                    ax.plot(
                        [r["round"] for r in recs],
                        [r["auc"] for r in recs],
                        style,
                        marker="o",
                        ms=3,
                        color=colours[p],
                        label=f"{_label(PRIVACY_LABELS, p)}, target {phase}",
                    )
        ax.axhline(0.5, ls=":", c="grey", lw=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0.2, 0.9)
        ax.set_title(_label(STRATEGY_LABELS, s), fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        integer_rounds(ax)
        ax.set_ylabel("AUC", fontsize=8)
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=7)
    fig.suptitle("CIA: loss-threshold AUC of the shadow set vs held-out", fontsize=9)
    return save_figure(fig, path, layout=(0, 0.12 if nrow == 1 else 0.08, 1, 0.95))


# --- DLG -----------------------------------------------------------------------------------


def plot_reconstructions(
    originals: np.ndarray,
    columns: Mapping[str, np.ndarray],
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """Grid of images: rows = examples, first column the originals, then one per setting."""
    originals = np.asarray(originals)
    n = len(originals)
    labels = ["original", *columns]
    images = [originals, *[np.asarray(v) for v in columns.values()]]
    fig, axes = plt.subplots(
        n, len(labels), figsize=(1.3 * len(labels), 1.3 * n + 0.4), squeeze=False
    )
    for j, (label, block) in enumerate(zip(labels, images)):
        for i in range(n):
            ax = axes[i][j]
            img = block[i]
            ax.imshow(
                np.clip(img[..., 0] if img.ndim == 3 else img, 0, 1), cmap="gray", vmin=0, vmax=1
            )
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(label, fontsize=7)
    if title:
        fig.suptitle(title, fontsize=8)
    return save_figure(fig, path)


def _mean_std(values: Sequence[float]) -> str:
    return reporting.fmt_mean_std(values, empty="n/a")


def dlg_laplace_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """GP Fig. 5 as a table: one row per ν (``nu`` None = no defence), metrics mean ± std."""
    out = []
    for row in rows:
        nu = row["nu"]
        out.append(
            [
                "none" if nu is None else fmt(nu, 3 if nu < 1 else 0),
                _mean_std(row["ssim"]),
                _mean_std(row["psnr"]),
                _mean_std(row["mse"]),
                fmt(float(np.mean(row["label_ok"]))),
            ]
        )
    return markdown_table(["Laplace ν", "SSIM", "PSNR (dB)", "MSE", "label recovered"], out)


def dlg_zonal_table(rows: Sequence[Mapping[str, Any]], metric: str = "ssim") -> str:
    """HDP Table IV shape: one row per noise multiplier z, columns LDP / HDP / CDP / No DP."""
    order = ["ldp", "hdp", "cdp", "none"]
    names = {"ldp": "LDP", "hdp": "HDP", "cdp": "CDP", "none": "No DP"}
    out = []
    for row in rows:
        out.append(
            [
                f"digits, z = {fmt(row['z'], 3)}",
                *[_mean_std(row[p][metric]) if p in row else "n/a" for p in order],
            ]
        )
    return markdown_table([f"Dataset ({metric.upper()})", *[names[p] for p in order]], out)


# --- membership ------------------------------------------------------------------------------


def membership_report(results: Sequence[Mapping[str, Any]]) -> str:
    """AUC and advantage per run, and a strategies × privacy AUC table."""
    rows = [
        [
            r.get("scenario"),
            _label(STRATEGY_LABELS, str(r.get("strategy"))),
            _label(PRIVACY_LABELS, str(selected(r))),
            r.get("seed"),
            r["auc"],
            r["advantage"],
            (r.get("tpr_at_low_fpr") or {}).get("tpr_at_0.1pct_fpr"),
            (r.get("tpr_at_low_fpr") or {}).get("tpr_at_1pct_fpr"),
            r["member_loss_mean"],
            r["nonmember_loss_mean"],
            r["n_members"],
            r["n_nonmembers"],
        ]
        for r in results
    ]
    out = [
        "# Membership inference (loss threshold) on the final global model",
        "",
        "Members: the clients' training splits; non-members: the clients' held-out test splits. "
        "AUC 0.5 = no information; advantage = max(TPR − FPR); TPR at 0.1 % / 1 % FPR = the "
        "largest TPR of a threshold with FPR at most that (resolution 1/non-members; Carlini "
        "et al.'s low-FPR measure).",
        "",
        markdown_table(
            [
                "Scenario",
                "Strategy",
                "Privacy",
                "Seed",
                "AUC",
                "Advantage",
                "TPR@0.1%FPR",
                "TPR@1%FPR",
                "Loss members",
                "Loss non-members",
                "Members",
                "Non-members",
            ],
            rows,
        ),
        "",
    ]
    strategies = _ordered({str(r.get("strategy")) for r in results}, list(STRATEGY_LABELS))
    privacies = _ordered({str(selected(r)) for r in results}, list(PRIVACY_LABELS))
    if len(privacies) > 1 or len(strategies) > 1:
        grid = {(str(r.get("strategy")), str(selected(r))): r for r in results}
        rows = [
            [_label(STRATEGY_LABELS, s)]
            + [
                f"{fmt(grid[(s, p)]['auc'])} / {fmt(grid[(s, p)]['advantage'])}"
                if (s, p) in grid
                else "n/a"
                for p in privacies
            ]
            for s in strategies
        ]
        out += [
            "## AUC / advantage",
            "",
            markdown_table(["Strategy", *[_label(PRIVACY_LABELS, p) for p in privacies]], rows),
            "",
        ]
    return "\n".join(out)
