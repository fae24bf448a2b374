"""Outputs of an IFCA run: summary.json, plots, and the sweep table (GP Table 2's shape)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from fedpriv.scenarios.app.client_tasks import IFCA_TASK as KIND
from fedpriv.scenarios.config.specs import ServerRun
from fedpriv.strategies.ifca import SMALL_MODEL, LaplaceIFCA, hypotheses_from_record

from fedpriv.ifca import flatten, match_hypotheses
from fedpriv.privacy.disclosure import ifca_privacy_block


def build_summary(
    run: ServerRun, data, strategy: LaplaceIFCA, best, final, per_client, rounds
) -> dict:
    """summary.json of one IFCA run (see the module docstring)."""
    cfg = run.record  # written as the run's config; IFCA's own keys
    hyps = np.stack([flatten(h) for h in hypotheses_from_record(best)])
    ledger = strategy.ledger
    train = strategy.train_partitions
    summary: dict[str, Any] = {
        "scenario": run.spec.scenario,
        "kind": KIND,
        "seed": run.spec.seed,
        "config": dict(cfg),
        "final": final or {},
        "per_client": per_client,
        "privacy": ifca_privacy_block(opted_in=run.spec.unaccounted_metrics),
        "best_round": strategy.best_round,
        "rounds_run": strategy.rounds_run,
        "stopped": strategy.stopped,
        "num_params": int(hyps.shape[1]),
        "hypothesis_norms": np.linalg.norm(hyps, axis=1).tolist(),
        "leakage": {
            "per_participation": strategy.leakage_per_participation(),
            "meaning": "GP's heuristic n/nu per participation (see privacy.heuristic); sums "
            "compose (GP Thm 3.1); null = nu = 0, no sanitization.",
            "budget": cfg["leakage-budget"] or None,
            "per_client": {str(p): ledger.spent.get(p, 0.0) for p in train}
            if strategy.nu > 0
            else None,
            "participations": {str(p): strategy.participations.get(p, 0) for p in train},
            "stats": strategy.ledger_report(),
            "declined": sum(len(r.get("declined", [])) for r in rounds),
            "ledger_location": "authoritative per-client ledgers in each client's "
            "context.state; these figures are the server's mirror",
        },
        "validation": {
            "objective": [
                [r["round"], r["validation"]["objective"]] for r in rounds if "validation" in r
            ],
            "best_round": strategy.best_round,
        },
    }
    if hyps.shape[1] <= SMALL_MODEL:
        summary["hypotheses"] = hyps.tolist()
    star = data.info.get("theta_star")
    if star is not None and np.asarray(star).shape[1] == hyps.shape[1]:
        star = np.asarray(star, dtype=np.float64)
        summary["theta_star"] = star.tolist()
        summary["theta_star_match"] = match_hypotheses(hyps, star)
        summary["theta_star_match"]["midpoint_distance"] = np.linalg.norm(
            hyps - star.mean(axis=0), axis=1
        ).tolist()
    return summary


def _mean_text(values: list) -> str:
    return f"{np.mean(values):.4g}" if values else "-"


def _mean_std_text(summaries: list[dict[str, Any]], metric: str) -> str:
    """``mean ± std`` of ``final[metric]`` over the runs that report it; ``-`` when none does
    (accuracy of a regression task: GP's synthetic data has RMSE only)."""
    values = [s["final"][metric] for s in summaries if metric in s["final"]]
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}" if values else "-"


def sweep_table(results: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """Markdown table (GP Table 2 shape): one row per sweep setting, seeds pooled.

    accuracy = example-weighted accuracy of every training user with its best hypothesis on
    its test split (mean ± std over seeds; ``-`` for a regression task, which has none);
    objective = the same users' mean loss (RMSE for
    regression); leakage = n/ν per participation and the mirror ledger's median / max.
    """
    groups: dict[str, list[dict[str, Any]]] = {}
    for overrides, summary in results:
        label = ", ".join(f"{k}={v}" for k, v in overrides.items() if k != "seed") or "(base)"
        groups.setdefault(label, []).append(summary)
    lines = [
        "| setting | runs | accuracy (mean ± std) | objective | leakage / participation | "
        "median leakage | max leakage | best round |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, summaries in groups.items():
        obj = [s["final"].get("objective", math.nan) for s in summaries]
        stats = [s["leakage"]["stats"] for s in summaries]
        per = [s["leakage"]["per_participation"] for s in summaries]
        med = [st["median"] for st in stats if st.get("median") is not None]
        mx = [st["max"] for st in stats if st.get("max") is not None]
        lines.append(
            f"| {label} | {len(summaries)} | {_mean_std_text(summaries, 'accuracy_weighted')} | "
            f"{np.mean(obj):.3f} | {_mean_text([v for v in per if v is not None])} | "
            f"{_mean_text(med)} | {_mean_text(mx)} | "
            f"{', '.join(str(s['best_round']) for s in summaries)} |"
        )
    return "\n".join(lines) + "\n"
