"""The run's figures say what the console and summary.json say.

accuracy.png carries σ and ε per round on a second axis, has no legend entry without a line
and ticks rounds on integers; roc.png states each curve's AUC (checked against
scikit-learn's ``roc_auc_score``); leakage_hist.png's median is the ledger's median over
the clients that participated, and no bar starts below zero; a baseline band of a score
never goes past 1. The figures are caught before they are saved (``save_figure``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpriv.reporting import ifca_plots, plots


@pytest.fixture
def figures(monkeypatch, tmp_path):
    """Every figure a plot function would save, in order (the file is still written)."""
    from fedpriv.reporting.tables import save_figure

    caught = []

    def keep(fig, path, **kwargs):
        caught.append(fig)
        return save_figure(fig, path, **kwargs)  # drawn and written as always

    monkeypatch.setattr(plots, "save_figure", keep)
    monkeypatch.setattr(ifca_plots, "_save", keep)
    return caught


def _legend(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend else []


def _rounds(n: int, *, epsilon: bool) -> list[dict]:
    out = [{"round": 0, "server": {"accuracy": 0.1}}]
    for r in range(1, n + 1):
        line = {"round": r, "server": {"accuracy": 0.5 + 0.05 * r}, "distributed": {},
                "dp-sigma": 0.02 * r}  # fmt: skip
        if epsilon:
            line["dp-epsilon"] = 0.4 * r
        out.append(line)
    return out


def test_accuracy_png_has_sigma_and_epsilon_and_only_drawn_lines(figures, tmp_path):
    plots.plot_run_accuracy(_rounds(4, epsilon=True), tmp_path / "a.png", title="t")
    (fig,) = figures
    ax, twin = fig.axes
    # the clients reported no accuracy: no "distributed" entry (it would have no line)
    assert _legend(ax) == ["server test", "σ", "ε so far"]
    lines = {line.get_label(): line for line in twin.get_lines()}
    assert list(lines["σ"].get_ydata()) == pytest.approx([0.02, 0.04, 0.06, 0.08])
    assert list(lines["ε so far"].get_ydata()) == pytest.approx([0.4, 0.8, 1.2, 1.6])
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks)


def test_metric_dp_accuracy_png_shows_sigma_and_no_epsilon(figures, tmp_path):
    plots.plot_run_accuracy(_rounds(2, epsilon=False), tmp_path / "a.png", title="t")
    ax, twin = figures[0].axes
    assert _legend(ax) == ["server test", "σ"]
    lo, hi = ax.get_xlim()
    assert [t for t in ax.get_xticks() if lo <= t <= hi] == [1.0, 2.0]  # never 1.25, 1.75


def test_roc_png_states_the_auc(figures, tmp_path):
    from sklearn.metrics import roc_auc_score, roc_curve

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    score = y + rng.normal(0, 1.2, 300)
    fpr, tpr, _ = roc_curve(y, score)
    plots.plot_roc({"micro": (fpr, tpr)}, tmp_path / "roc.png")
    (text,) = [t for t in _legend(figures[0].axes[0]) if t.startswith("micro")]
    assert text == f"micro (AUC {roc_auc_score(y, score):.3f})"


def test_leakage_histogram_median_is_the_ledgers_and_no_bar_below_zero(figures, tmp_path):
    from fedpriv.privacy.accounting.leakage import LeakageLedger

    ledger = LeakageLedger()
    per = 2.0
    for client, times in enumerate([1, 1, 2, 3, 3, 4]):
        for _ in range(times):
            ledger.charge(client, per)
    values = [ledger.spent.get(c, 0.0) for c in range(10)]  # 4 clients never sampled
    ifca_plots.plot_leakage_histogram(values, tmp_path / "h.png", per_participation=per)
    ax = figures[0].axes[0]
    median = [line for line in ax.get_lines() if line.get_label().startswith("median")][0]
    assert median.get_xdata()[0] == pytest.approx(ledger.stats()["median"])  # 5.0, not 2.0
    assert ledger.stats()["median"] != float(np.median(values))
    assert min(p.get_x() for p in ax.patches) >= 0.0
    assert ax.get_xlim()[0] == 0.0
    heights = [p.get_height() for p in ax.patches]
    assert heights[0] == 4 and sum(heights) == 10


def test_baseline_score_bands_stay_within_zero_and_one():
    from fedpriv.baseline import RECORD_RULE, Band, make_band

    band = make_band("score", [0.97, 0.99], RECORD_RULE)
    assert band.hi == 1.0 and band.lo == pytest.approx(0.97 - 0.08)
    assert make_band("score", [0.01, 0.03], RECORD_RULE).lo == 0.0
    loss = make_band("value", [2.0, 2.5], RECORD_RULE)
    assert loss.hi > 1.0 and not math.isnan(loss.lo)  # values are not capped
    old_record = {"cls": "score", "lo": 0.9, "hi": 1.07}  # recorded before the cap
    assert Band.from_json(old_record).text() == Band("score", 0.9, 1.0).text()


def test_ifca_plots_draw_validation_when_round_0_had_none(figures, tmp_path):
    """The validation users' lifetime budget spent: round 0 has no validation entry, later
    rounds do (a run of a fresh validation set); the plots are drawn, not a KeyError."""
    rounds = [{"round": 0}] + [
        {"round": r, "validation": {"objective": 1.0 / r, "rmse": 1.0 / r},
         "ledger": {"per_cluster_max": [0.1 * r, 0.2 * r]}}
        for r in (1, 2, 3)
    ]  # fmt: skip
    summary = {"leakage": {"per_client": None}, "num_params": 3}
    ifca_plots.write_run_plots("t", rounds, summary, tmp_path, theta_star=None,
                               per_participation=None, best_round=2)  # fmt: skip
    assert (tmp_path / "validation_loss.png").exists()
    ax = figures[-1].axes[0]
    assert "RMSE" in " ".join(_legend(ax) + [ax.get_ylabel(), ax.get_title()])


def test_coinciding_accuracy_lines_stay_distinguishable(figures, tmp_path):
    """HDP's comparison.png: none and CDP can end on the same accuracies; each line has its own
    marker and dash pattern, so the one drawn first is not hidden under the other."""
    same = [0.1, 0.5, 0.9]
    plots.plot_accuracy_per_round({"none": same, "ldp": [0.1, 0.2, 0.3], "cdp": same},
                                  tmp_path / "c.png")  # fmt: skip
    (fig,) = figures
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines.values()}
    assert len(styles) == 3
    assert list(lines["none"].get_ydata()) == list(lines["cdp"].get_ydata()) == same
