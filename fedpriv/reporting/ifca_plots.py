"""PNG plots of IFCA runs in the shapes of the GP figures (matplotlib, Agg backend).

- :func:`plot_leakage_histogram` — GP Fig. 4: empirical distribution of the per-client
  leakage (summed ε‖δ‖ = n/ν per participation) over the clients.
- :func:`plot_params_scatter` — GP Fig. 1 (a, d, g): the parameter vectors released by the
  clients, round by round (colour = round), the hypotheses' trajectories and the true optima
  θ*; 2-parameter models only.
- :func:`plot_leakage_per_cluster` — GP Fig. 2: max leakage among the clients of each
  cluster against the round.
- :func:`plot_validation_loss` — GP Fig. 1 (c, f, i): validation loss against the round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedpriv.reporting.tables import integer_rounds, save_figure  # noqa: E402

_save = save_figure


def plot_leakage_histogram(
    leakage: Sequence[float],
    path: str | Path,
    *,
    per_participation: Optional[float] = None,
    title: str = "",
) -> Path:
    """Histogram of per-client leakage (GP Fig. 4). ``leakage`` holds one value per client
    (0 for clients never sampled); bins are aligned on multiples of ``per_participation``
    (n/ν) when given, so each bar is a number of participations; no bin starts below 0.

    The median line is the median over the clients that participated (leakage > 0), the
    figure the console and summary.json state (:meth:`LeakageLedger.stats`); the never-sampled
    clients still have their bar at 0."""
    values = np.asarray([float(v) for v in leakage], dtype=np.float64)
    fig, ax = plt.subplots(figsize=(6, 4))
    if values.size and per_participation and per_participation > 0:
        top = int(np.ceil(values.max() / per_participation + 1e-9))
        bins = (np.arange(top + 2) - 0.5) * per_participation
        bins[0] = 0.0  # the "never sampled" bar: [0, n/(2ν)), nothing below zero
    else:
        bins = np.linspace(0.0, max(float(values.max()) if values.size else 1.0, 1e-12), 21)
    ax.hist(values, bins=bins, color="tab:blue", edgecolor="white")
    ax.set_xlim(left=0.0)
    ax.set_xlabel(r"leakage $\sum \varepsilon\,\|\delta\|_2$ per client (GP heuristic)")
    ax.set_ylabel("clients")
    participated = values[values > 0]
    if participated.size:
        median = float(np.median(participated))
        ax.axvline(median, c="k", ls="--", lw=1, label=f"median of sampled clients {median:.3g}")
        ax.axvline(float(values.max()), c="tab:red", ls=":", lw=1, label="max")
        ax.legend(fontsize=8)
    ax.set_title(title or f"{values.size} clients")
    return _save(fig, path)


def plot_params_scatter(
    released: Sequence[tuple[int, np.ndarray]],
    hypotheses: Sequence[tuple[int, np.ndarray]],
    path: str | Path,
    *,
    theta_star: Optional[np.ndarray] = None,
    title: str = "",
) -> Path:
    """GP Fig. 1 (a, d, g) for 2-parameter models.

    ``released``: (round, U'×2 array of the vectors the server received); ``hypotheses``:
    (round, k×2 array) with round 0 = the initial hypotheses; ``theta_star``: optional
    k*×2 optima (the synthetic experiment's θ*).
    """
    fig, ax = plt.subplots(figsize=(6, 5))
    rounds = [r for r, _ in released] or [0]
    norm = matplotlib.colors.Normalize(vmin=min(rounds), vmax=max(max(rounds), 1))
    cmap = plt.get_cmap("viridis")
    for r, points in released:
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        if len(pts):
            ax.scatter(pts[:, 0], pts[:, 1], s=10, color=cmap(norm(r)), alpha=0.6)
    if hypotheses:
        traj = np.stack([np.asarray(h, dtype=np.float64).reshape(-1, 2) for _, h in hypotheses])
        for j in range(traj.shape[1]):
            ax.plot(traj[:, j, 0], traj[:, j, 1], "-", c="tab:red", lw=1, alpha=0.8)
            ax.plot(
                traj[-1, j, 0],
                traj[-1, j, 1],
                "o",
                c="tab:red",
                ms=6,
                label="final hypotheses" if j == 0 else None,
            )
            ax.plot(
                traj[0, j, 0],
                traj[0, j, 1],
                "s",
                c="tab:orange",
                ms=5,
                label="initial hypotheses" if j == 0 else None,
            )
    if theta_star is not None:
        star = np.asarray(theta_star, dtype=np.float64).reshape(-1, 2)
        ax.plot(star[:, 0], star[:, 1], "*", c="k", ms=14, label=r"$\theta^*$")
    fig.colorbar(matplotlib.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="round")
    ax.set_xlabel(r"$\theta_1$")
    ax.set_ylabel(r"$\theta_2$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title or "released parameters (server view)")
    return _save(fig, path)


def plot_leakage_per_cluster(
    rounds: Sequence[int],
    per_cluster_max: Sequence[Sequence[float]],
    path: str | Path,
    *,
    title: str = "",
) -> Path:
    """GP Fig. 2: max leakage among the clients last assigned to each cluster, per round."""
    fig, ax = plt.subplots(figsize=(6, 4))
    values = np.asarray(per_cluster_max, dtype=np.float64)
    if values.size:
        for j in range(values.shape[1]):
            ax.step(rounds, values[:, j], where="post", label=f"cluster {j}")
        ax.legend(fontsize=8)
    ax.set_xlabel("round")
    integer_rounds(ax)
    ax.set_ylabel("max leakage in cluster")
    ax.grid(alpha=0.3)
    ax.set_title(title)
    return _save(fig, path)


def plot_validation_loss(
    series: Mapping[str, tuple[Sequence[int], Sequence[float]]],
    path: str | Path,
    *,
    best_round: Optional[int] = None,
    ylabel: str = "validation loss",
    title: str = "",
) -> Path:
    """GP Fig. 1 (c, f, i): one line per label, validation loss against the round."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker="o", ms=3, label=label)
    if best_round is not None:
        ax.axvline(best_round, c="grey", ls="--", lw=1, label="best (kept)")
    ax.set_xlabel("round")
    integer_rounds(ax)
    ax.set_ylabel(ylabel)
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return _save(fig, path)


def run_title(scenario: str, num_hypotheses: int, noise_multiplier: float, seed: int) -> str:
    """The title of one IFCA run's figures: scenario, k hypotheses, GP's ν, seed."""
    return f"{scenario} k={num_hypotheses} nu={noise_multiplier:g} seed {seed}"


def write_run_plots(
    title: str,
    rounds: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    out_dir: Path,
    *,
    theta_star: Optional[np.ndarray],
    per_participation: Optional[float],
    best_round: Optional[int],
) -> None:
    """The GP-style figures of one IFCA run (leakage histogram and per cluster, parameter
    scatter for 2-parameter models, validation loss) into ``out_dir``, titled ``title``
    (:func:`run_title`); ``rounds`` and ``summary`` are the run's records."""
    per_client = summary["leakage"]["per_client"]
    if per_client is not None:
        plot_leakage_histogram(
            list(per_client.values()),
            out_dir / "leakage_hist.png",
            per_participation=per_participation,
            title=title,
        )
        trained = [r for r in rounds if r["round"] > 0]
        plot_leakage_per_cluster(
            [r["round"] for r in trained],
            [r["ledger"]["per_cluster_max"] for r in trained],
            out_dir / "leakage_per_cluster.png",
            title=title,
        )
    if summary["num_params"] == 2:
        released = [(r["round"], np.asarray(r.get("released", []))) for r in rounds if r["round"]]
        hyps = [(r["round"], np.asarray(r["hypotheses"])) for r in rounds if "hypotheses" in r]
        plot_params_scatter(
            released, hyps, out_dir / "params_scatter.png", theta_star=theta_star, title=title
        )
    checked = [r for r in rounds if "validation" in r]  # none where the validation users
    val = [(r["round"], r["validation"]["objective"]) for r in checked]  # declined (budget)
    if val:
        label = "RMSE (GP Eq. 10)" if "rmse" in checked[0]["validation"] else "cross-entropy"
        plot_validation_loss(
            {label: ([v[0] for v in val], [v[1] for v in val])},
            out_dir / "validation_loss.png",
            best_round=best_round,
            title=title,
        )
