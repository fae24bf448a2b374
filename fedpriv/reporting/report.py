"""Markdown tables and plots of a grid directory, in the MP paper's shape (MP §7, App. B, C).

Input: a grid directory ``D/<strategy>/<privacy>/seed<k>/`` (``fedpriv.grid``), each run
with ``summary.json``, ``rounds.jsonl`` and ``test_predictions.npz``. Output:
``D/report.md`` and PNGs in ``D/plots/``.

Tables (strategy rows × privacy-mode columns; "—" where a cell has no complete run):

- **A** (MP Tables 4, 6): last-k rounds accuracy. For one run, m_s = mean of the server
  test accuracy over its last k rounds; a cell shows mean_s(m_s) ± std_s(m_s) over seeds.
  **A′**: the same for the clients' test sets (example-weighted distributed accuracy, the
  "aggregated accuracy" MP's tables report).
- **B** (MP Tables 5, 7, plus App. C's AUC): final server test-set accuracy, macro F1,
  macro precision and micro one-vs-rest ROC-AUC, mean ± std over seeds.
- **Privacy**: noise multiplier z, noise std σ (mean over rounds), distance d (mean over
  rounds), ε and δ, mean over seeds, from each run's typed ``privacy_figures``
  (:class:`fedpriv.reporting.records.PrivacyFigures`).

std is the population std over seeds (ddof = 0, as ``fedpriv.metrics.last_k_stats``);
with one seed it is 0.

Plots: per strategy, accuracy per round with one line per privacy mode (mean over seeds,
band = min..max over seeds; MP App. B); per strategy, micro-averaged ROC curves with one
curve per privacy mode (TPR averaged over seeds on a common FPR grid, legend AUC mean ±
std over seeds; MP App. C); and MP Fig. B.2's layout (one panel per privacy mode, one line
per strategy).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedpriv.grid import Groups, RunResult, collect_results
from fedpriv.privacy.modes import ModeError, dp_sgd, get
from fedpriv.reporting.records import PrivacyFigures
from fedpriv.reporting.report_plots import (  # noqa: F401  (mean_roc: part of the report's API)
    mean_roc,
    plot_accuracy_by_privacy,
    plot_strategy_accuracy,
    plot_strategy_roc,
)
from fedpriv.reporting.runlog import from_json_number
from fedpriv.reporting.tables import (
    DASH,
    FINAL_METRICS,
    PRIVACY_LABELS,
    PRIVACY_ORDER,
    STRATEGY_LABELS,
    STRATEGY_ORDER,
    fmt_mean_std,
    fmt_value,
    markdown_table,
)
from fedpriv.seeds import NOISE_LABEL_KEY


def _ordered(items: Iterable[str], order: Sequence[str]) -> list[str]:
    items = set(items)
    return [x for x in order if x in items] + sorted(items - set(order))


def group_runs(runs: Iterable[RunResult]) -> Groups:
    """(strategy, privacy) -> runs sorted by seed."""
    groups: Groups = {}
    for run in runs:
        groups.setdefault((run.strategy, run.privacy), []).append(run)
    return {key: sorted(value, key=lambda r: r.seed) for key, value in groups.items()}


def run_last_k(run: RunResult, *, k: int, source: str) -> float:
    """Mean accuracy of one run's last k rounds (summary ``last5`` when rounds are absent)."""
    value = run.last_k_mean(k, source)
    if math.isnan(value) and k == 5 and not run.rounds:
        key = "accuracy_mean" if source == "server" else "distributed_accuracy_mean"
        raw = run.summary.get("last5", {}).get(key)
        value = float(raw) if isinstance(raw, (int, float)) else float("nan")
    return value


# --- tables -------------------------------------------------------------------------------


def last_k_table(
    groups: Groups,
    strategies: Sequence[str],
    modes: Sequence[str],
    *,
    k: int = 5,
    source: str = "server",
) -> str:
    """Table A / A′: mean over seeds ± std over seeds of each run's last-k mean accuracy."""
    header = ["Strategy"] + [PRIVACY_LABELS.get(m, m) for m in modes]
    rows = []
    for strategy in strategies:
        row = [STRATEGY_LABELS.get(strategy, strategy)]
        for mode in modes:
            values = [run_last_k(r, k=k, source=source) for r in groups.get((strategy, mode), [])]
            row.append(fmt_mean_std(values))
        rows.append(row)
    return markdown_table(header, rows)


def final_table(groups: Groups, strategies: Sequence[str], modes: Sequence[str]) -> str:
    """Table B: final test metrics, mean ± std over seeds (MP Tables 5, 7 + ROC-AUC)."""
    header = ["Strategy"] + [
        f"{PRIVACY_LABELS.get(m, m)} {label}" for m in modes for _, label in FINAL_METRICS
    ]
    rows = []
    for strategy in strategies:
        row = [STRATEGY_LABELS.get(strategy, strategy)]
        for mode in modes:
            runs = groups.get((strategy, mode), [])
            row += [fmt_mean_std([r.final(key) for r in runs]) for key, _ in FINAL_METRICS]
        rows.append(row)
    return markdown_table(header, rows)


def privacy_figures(run: RunResult) -> dict[str, Any]:
    """Bound, z, σ, d, ε, ε_RDP, δ of one run (None where the run does not report them).

    Read from the run's typed figures (:class:`fedpriv.reporting.records.PrivacyFigures`, written by
    the privacy feature's summary block): σ and d are means over the noised rounds; ε is a
    guarantee only (metric DP is a heuristic: no ε; ``bound`` names the adjacency and sampling
    of the ε, or "heuristic, no ε");
    for DP-SGD σ = z·C (the noise on the summed clipped gradients) and ε is the largest
    client ε.
    """
    figures = PrivacyFigures.from_summary(run.summary)
    if figures is None:
        return dict.fromkeys(("bound", "z", "sigma", "d", "epsilon", "epsilon_rdp", "delta"))
    return {
        "bound": figures.bound,
        "z": figures.noise_multiplier,
        "sigma": figures.sigma_mean,
        "d": figures.distance_mean,
        "epsilon": figures.epsilon,
        "epsilon_rdp": figures.epsilon_rdp,
        "delta": figures.delta,
    }


def _protects(mode: str) -> bool:
    """False for a mode that protects nothing (``Mode.filters = False``, e.g. none)."""
    try:
        return get(mode).filters
    except ModeError:  # a result written by a mode this install does not know
        return True


def privacy_table(groups: Groups, strategies: Sequence[str], modes: Sequence[str]) -> str | None:
    """Rows (strategy, privacy mode ≠ none) with z, σ, d, ε, δ (mean over seeds)."""
    rows = []
    for strategy in strategies:
        for mode in modes:
            runs = groups.get((strategy, mode), [])
            figs = [privacy_figures(r) for r in runs]
            if not _protects(mode) or not any(v is not None for f in figs for v in f.values()):
                continue
            row = [STRATEGY_LABELS.get(strategy, strategy), PRIVACY_LABELS.get(mode, mode)]
            row.append(next((f["bound"] for f in figs if f["bound"]), DASH))
            for key in ("z", "sigma", "d", "epsilon", "epsilon_rdp", "delta"):
                values = [f[key] for f in figs if f[key] is not None]
                if not values:
                    row.append(DASH)
                elif any(math.isinf(v) for v in values):
                    row.append("inf")
                else:
                    row.append(fmt_value(float(np.mean(values))))
                if key == "epsilon":
                    row.append(noise_randomness(runs))
            row.append(str(len(runs)))
            rows.append(row)
    if not rows:
        return None
    header = ["Strategy", "Privacy", "ε bounds (adjacency; sampling)", "z", "σ (mean over rounds)"]
    header += ["d (mean over rounds)", "ε (upper bound)", "noise randomness", "ε (RDP bound)"]
    header += ["δ", "seeds"]
    return markdown_table(header, rows)


def noise_randomness(runs: Sequence[RunResult]) -> str:
    """The runs' ``noise-randomness`` labels (``fedpriv.seeds.noise_label``): "os-entropy",
    or "seeded: valid only while the seed is secret from every party"; "—" for runs written
    before the label existed."""
    labels = sorted({str(r.summary.get(NOISE_LABEL_KEY, DASH)) for r in runs})
    return " / ".join(labels) if labels else DASH


def dpsgd_client_table(groups: Groups, strategies: Sequence[str]) -> str | None:
    """DP-SGD: ε per client (mean over seeds), from ``privacy.dp_sgd.epsilon_per_client``."""
    rows, clients = [], set()
    per_strategy = {}
    for strategy in strategies:
        eps: dict[str, list[float]] = {}
        for run in groups.get((strategy, dp_sgd.MODE.name), []):
            block = run.summary.get(dp_sgd.MODE.summary_key, {}).get("dp_sgd", {})
            for client, value in (block.get("epsilon_per_client") or {}).items():
                number = from_json_number(value)
                if number is not None:
                    eps.setdefault(str(client), []).append(number)
        if eps:
            per_strategy[strategy] = eps
            clients |= set(eps)
    if not per_strategy:
        return None
    ordered = sorted(clients, key=lambda c: (not c.isdigit(), int(c) if c.isdigit() else c))
    for strategy, eps in per_strategy.items():
        rows.append(
            [STRATEGY_LABELS.get(strategy, strategy)]
            + [fmt_value(float(np.mean(eps[c]))) if c in eps else DASH for c in ordered]
        )
    return markdown_table(["Strategy"] + [f"client {c}" for c in ordered], rows)


# --- report -------------------------------------------------------------------------------


def _coverage(
    groups: Groups, strategies: Sequence[str], modes: Sequence[str], seeds: Sequence[int]
) -> tuple[str, list[str]]:
    rows, missing = [], []
    for strategy in strategies:
        row = [STRATEGY_LABELS.get(strategy, strategy)]
        for mode in modes:
            have = {r.seed for r in groups.get((strategy, mode), [])}
            row.append(str(len(have)) if have else DASH)
            missing += [f"{strategy}/{mode}/seed{s}" for s in seeds if s not in have]
        rows.append(row)
    header = ["Strategy"] + [PRIVACY_LABELS.get(m, m) for m in modes]
    return markdown_table(header, rows), missing


def build_report(output_dir: str | Path, *, last_k: int = 5) -> tuple[str, list[Path]]:
    """The Markdown text of the report and the plots it wrote (in ``output_dir/plots``)."""
    if isinstance(last_k, bool) or not isinstance(last_k, int) or last_k < 1:
        raise ValueError(f"last_k = {last_k!r}: expected an integer >= 1")
    root = Path(output_dir)
    runs = collect_results(root)
    groups = group_runs(runs)
    strategies = _ordered({r.strategy for r in runs}, STRATEGY_ORDER)
    modes = _ordered({r.privacy for r in runs}, PRIVACY_ORDER)
    seeds = sorted({r.seed for r in runs})
    scenarios = sorted({str(r.summary.get("scenario", "?")) for r in runs})
    out = [f"# fedpriv grid report: `{root}`", ""]
    if not runs:
        out.append("No complete runs (no `<strategy>/<privacy>/seed<k>/summary.json`) found.")
        return "\n".join(out) + "\n", []
    rounds = sorted({len(r.series()) for r in runs})
    out += [
        f"Scenario: {', '.join(scenarios)}. Runs: {len(runs)}. Seeds: "
        f"{', '.join(map(str, seeds))}. Rounds: {', '.join(map(str, rounds))}.",
        "",
        "Cells show mean ± std over seeds (population std, ddof = 0); "
        f'"{DASH}" marks a cell without a complete run.',
        "",
    ]
    if rounds and min(rounds) < last_k:
        out += [
            f"Runs with fewer than {last_k} rounds: their last-{last_k} mean is over all "
            "their rounds.",
            "",
        ]
    coverage, missing = _coverage(groups, strategies, modes, seeds)
    out += ["## Complete runs per cell", "", coverage, ""]
    if missing:
        out += [f"Missing: {', '.join(missing)}.", ""]
    out += [
        f"## A. Mean accuracy of the last {last_k} rounds, server test set (MP Tables 4, 6)",
        "",
        "Per run: mean server test accuracy over its last "
        f"{last_k} rounds; cell: mean ± std of that over seeds.",
        "",
        last_k_table(groups, strategies, modes, k=last_k, source="server"),
        "",
    ]
    if any(
        r.series("distributed") and any(math.isfinite(v) for v in r.series("distributed"))
        for r in runs
    ):
        out += [
            f"## A′. Mean accuracy of the last {last_k} rounds, clients' test sets "
            '(example-weighted; MP\'s "aggregated accuracy")',
            "",
            last_k_table(groups, strategies, modes, k=last_k, source="distributed"),
            "",
        ]
    out += [
        "## B. Final model on the server test set (MP Tables 5, 7; ROC-AUC: App. C)",
        "",
        "Accuracy, macro F1, macro precision, micro one-vs-rest ROC-AUC; mean ± std over seeds.",
        "",
        final_table(groups, strategies, modes),
        "",
    ]
    table = privacy_table(groups, strategies, modes)
    if table:
        out += [
            "## Privacy",
            "",
            "z: noise multiplier; σ: std of the Gaussian noise (server "
            "wrappers: on the aggregate; DP-SGD: z·C on the summed clipped gradients); "
            "d: metric-privacy distance; ε at δ: an upper bound, under the adjacency and "
            "sampling in its column (global DP: min(PLD, RDP); DP-SGD: the largest client's "
            "bound). Metric privacy is a heuristic (noise scaled by a data-dependent d): no ε. "
            "Noise randomness: os-entropy (secret), or seeded (reproducible-noise; the ε is "
            "valid only while the seed is secret from every party).",
            "",
            table,
            "",
        ]
    clients = dpsgd_client_table(groups, strategies)
    if clients:
        out += ["### DP-SGD: example-level ε per client (mean over seeds)", "", clients, ""]
    plots_dir = root / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    acc_lines, roc_lines = [], []
    for strategy in strategies:
        acc_path = plots_dir / f"accuracy_{strategy}.png"
        acc = plot_strategy_accuracy(groups, strategy, modes, acc_path)
        roc = plot_strategy_roc(groups, strategy, modes, plots_dir / f"roc_{strategy}.png")
        for plot, lines in ((acc, acc_lines), (roc, roc_lines)):
            if plot is not None:
                written.append(plot)
                lines.append(f"![{plot.stem}](plots/{plot.name})")
    overview = plot_accuracy_by_privacy(
        groups, strategies, modes, plots_dir / "accuracy_by_privacy.png"
    )
    if overview is not None:
        written.append(overview)
    out += (
        ["## Accuracy per round (MP App. B)", "", "Mean over seeds; band: min..max over seeds.", ""]
        + acc_lines
        + [""]
    )
    if overview is not None:
        out += [
            "Server test accuracy, one panel per privacy mode (MP Fig. B.2 layout):",
            "",
            f"![accuracy_by_privacy](plots/{overview.name})",
            "",
        ]
    out += (
        [
            "## ROC curves (MP App. C)",
            "",
            "Micro-averaged one-vs-rest ROC of the final model on the server test set; TPR "
            "averaged over seeds; legend: AUC mean ± std over seeds.",
            "",
        ]
        + roc_lines
        + [""]
    )
    return "\n".join(out), written


def write_report(output_dir: str | Path, *, last_k: int = 5) -> Path:
    """Write ``output_dir/report.md`` (and its plots); return its path."""
    text, _ = build_report(output_dir, last_k=last_k)
    path = Path(output_dir) / "report.md"
    path.write_text(text)
    return path
