"""Compare finished runs: one table with mean ± std over seeds, one accuracy-vs-round plot.

Runs whose resolved configs (``summary.json``'s ``config``) differ only in the seed (and in
where they write: :data:`IGNORED`) form one group; each group is one row of the table and
one line of the plot. Per group, over its n runs (SPEC §6: mean ± std over seeds; the
population standard deviation, ``ddof = 0``, as ``fedpriv report``; no ± for one run):

- final accuracy on the server test set (``summary.json`` ``final.accuracy``);
- the mean of the last 5 rounds' accuracy (``last5.accuracy_mean``);
- ε: the typed privacy figure (:class:`fedpriv.reporting.records.PrivacyFigures`), or its
  bound text when the mode gives none (metric DP: "heuristic, no ε");
- the mean noise std σ over the noised rounds.

The plot draws each group's mean server accuracy per round with a ±std band, and its ε so
far per round (:meth:`fedpriv.reporting.records.RoundRecord.epsilon`) dashed on a second
axis. A group's label names the config keys in which the groups differ.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from fedpriv.grid import RunResult
from fedpriv.grid import load_run as grid_load_run
from fedpriv.reporting.records import PrivacyFigures
from fedpriv.reporting.runlog import from_json_number
from fedpriv.reporting.tables import DASH
from fedpriv.reporting.tables import mean_std as table_mean_std

# config keys that do not make two runs different experiments
IGNORED = frozenset({"seed", "output-dir", "run-plan", "tracking", "tracking-uri", "verbose"})


class CompareError(ValueError):
    """A run directory that cannot be compared (one line naming it and why)."""


def params_of(run: RunResult) -> Mapping[str, Any]:
    """The resolved config a run recorded (summary.json's ``config``)."""
    params = run.summary.get("config")
    return params if isinstance(params, Mapping) else {}


def _figure(run: RunResult, block: str, name: str) -> Optional[float]:
    """A number of summary.json (``final.accuracy``, ``last5.accuracy_mean``)."""
    return from_json_number((run.summary.get(block) or {}).get(name))


def run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """The run directories of ``paths``: a path with ``summary.json`` is a run; any other
    directory stands for every run below it (a grid's output directory)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if (path / "summary.json").is_file():
            out.append(path)
            continue
        found = sorted(p.parent for p in path.rglob("summary.json")) if path.is_dir() else []
        if not found:
            raise CompareError(f"{path}: no summary.json in or below it (not a finished run)")
        out.extend(found)
    return list(dict.fromkeys(out))


def load_run(path: str | Path) -> RunResult:
    """One finished run (:func:`fedpriv.grid.load_run`: summary.json and round records)."""
    run = grid_load_run(path)
    if run is None:
        raise CompareError(f"{path}: summary.json cannot be read")
    if not params_of(run):
        raise CompareError(f"{path}: summary.json has no config block")
    return run


def experiment_key(params: Mapping[str, Any]) -> str:
    """What makes two runs the same experiment: their config without :data:`IGNORED`."""
    return json.dumps({k: v for k, v in params.items() if k not in IGNORED}, sort_keys=True)


@dataclass(frozen=True)
class Group:
    """Runs that differ only in the seed, and the label of their row and line."""

    label: str
    runs: Sequence[RunResult]


def group_runs(runs: Sequence[RunResult]) -> list[Group]:
    """Runs grouped by :func:`experiment_key`, in the order first seen, each labelled by the
    keys whose values differ between the groups (the scenario name for a single group)."""
    groups: dict[str, list[RunResult]] = {}
    for run in runs:
        groups.setdefault(experiment_key(params_of(run)), []).append(run)
    firsts = [params_of(members[0]) for members in groups.values()]
    keys = sorted({k for p in firsts for k in p if k not in IGNORED})
    differing = [k for k in keys if len({json.dumps(p.get(k)) for p in firsts}) > 1]
    out = []
    for i, members in enumerate(groups.values()):
        params = params_of(members[0])
        words = [f"{k}={params.get(k)}" for k in differing[:3]]
        label = " ".join(words) or str(params.get("scenario", "run"))
        if len(differing) > 3:
            label += f" (+{len(differing) - 3} keys, group {i + 1})"
        out.append(Group(label, members))
    return out


def mean_std(values: Sequence[Optional[float]]) -> tuple[Optional[float], Optional[float]]:
    """Mean and std (population, ddof 0, as ``fedpriv report``) of the finite numbers among
    ``values``: (None, None) for none, std None for one."""
    mean, std, n = table_mean_std(v for v in values if v is not None)
    return (None, None) if n == 0 else (mean, std if n > 1 else None)


def fmt(mean: Optional[float], std: Optional[float], digits: int = 4) -> str:
    """``0.9444 ± 0.0123``, ``0.9444`` for one value, "—" for none."""
    if mean is None:
        return DASH
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def group_row(group: Group) -> dict[str, Any]:
    """One row: label, seeds, and the (mean, std) of each figure (module docstring)."""
    runs = group.runs
    figures = [PrivacyFigures.from_summary(r.summary) for r in runs]
    eps = mean_std([f.epsilon if f else None for f in figures])
    bounds = {f.bound for f in figures if f is not None and f.epsilon is None and f.bound}
    return {
        "label": group.label,
        "seeds": [r.seed for r in runs],
        "runs": [str(r.path) for r in runs],
        "final_accuracy": mean_std([_figure(r, "final", "accuracy") for r in runs]),
        "last5_accuracy": mean_std([_figure(r, "last5", "accuracy_mean") for r in runs]),
        "epsilon": eps,
        "epsilon_note": "; ".join(sorted(bounds)) if eps[0] is None else "",
        "sigma_mean": mean_std([f.sigma_mean if f else None for f in figures]),
    }


def compare_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown table of :func:`group_row` rows (mean ± std over seeds)."""
    lines = [
        "| runs | seeds | final accuracy | last-5 accuracy | ε | mean σ |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        eps = fmt(*row["epsilon"], digits=3)
        if row["epsilon_note"]:
            eps = f"{DASH} ({row['epsilon_note']})"
        seeds = ",".join(str(s) for s in row["seeds"])
        lines.append(
            f"| {row['label']} | {seeds} | {fmt(*row['final_accuracy'])} | "
            f"{fmt(*row['last5_accuracy'])} | {eps} | {fmt(*row['sigma_mean'], digits=4)} |"
        )
    return "\n".join(lines) + "\n"


def per_round(runs: Sequence[RunResult], value: Any) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Rounds (> 0) that every run recorded, and the mean and std (ddof 0) of ``value(record)``
    over the runs at each (NaN where a run has no number)."""
    maps = [{r.round: value(r) for r in run.rounds if r.round > 0} for run in runs]
    rounds = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
    table = np.array(
        [[np.nan if m[x] is None else float(m[x]) for x in rounds] for m in maps], dtype=float
    ).reshape(len(maps), len(rounds))
    with warnings.catch_warnings():  # all-NaN columns (no ε in a mode) stay NaN, silently
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(table, axis=0) if len(rounds) else np.array([])
        std = np.nanstd(table, axis=0) if len(maps) > 1 else np.zeros(len(rounds))
    return rounds, mean, std


def plot_compare(groups: Sequence[Group], path: str | Path, *, title: str = "") -> Path:
    """Accuracy per round (mean ± std band) per group, ε so far dashed on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fedpriv.reporting.tables import integer_rounds, save_figure

    fig, ax = plt.subplots(figsize=(7, 4.5))
    twin = None
    colours = plt.get_cmap("tab10").colors
    for group, colour in zip(groups, colours * (len(groups) // 10 + 1)):
        rounds, mean, std = per_round(group.runs, lambda r: r.metric("server", "accuracy"))
        n = len(group.runs)
        ax.plot(rounds, mean, marker="o", ms=3, c=colour, label=f"{group.label} (n={n})")
        if n > 1:
            low, high = np.maximum(mean - std, 0.0), np.minimum(mean + std, 1.0)
            ax.fill_between(rounds, low, high, color=colour, alpha=0.2)
        e_rounds, e_mean, _ = per_round(group.runs, lambda r: r.epsilon())
        if len(e_rounds) and np.isfinite(e_mean).any():
            twin = twin or ax.twinx()
            twin.plot(e_rounds, e_mean, ls="--", c=colour, label=f"ε {group.label}")
    ax.set_xlabel("round")
    ax.set_ylabel("server test accuracy (mean ± std over seeds)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.set_title(title)
    integer_rounds(ax)
    handles, labels = ax.get_legend_handles_labels()
    if twin is not None:
        twin.set_ylabel("ε so far (dashed)")
        more = twin.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    ax.legend(handles, labels, fontsize=7, loc="lower right")
    return save_figure(fig, path)


def compare_runs(paths: Sequence[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Load, group, tabulate and plot ``paths``; write ``compare.md``, ``compare.json`` and
    ``compare.png`` into ``out_dir``. Returns the rows, the table and the files."""
    runs = [load_run(p) for p in run_dirs(paths)]
    groups = group_runs(runs)
    rows = [group_row(g) for g in groups]
    table = compare_table(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plot = plot_compare(groups, out / "compare.png", title=f"{len(runs)} runs")
    (out / "compare.md").write_text(table)
    doc = {"rows": rows, "table": table, "plot": str(plot), "markdown": str(out / "compare.md")}
    (out / "compare.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc
