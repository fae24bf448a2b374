"""The cost of ``fedpriv audit`` against the ``fedpriv run`` it audits.

One row: the default config (``scenario = digits``, metric DP around FedAvg) run by
``fedpriv run`` and by ``fedpriv audit`` (``audit-canaries`` = 100, its default: canary
replies inserted every round, then the one-run ε-DP / f-DP bounds and the one-shot estimate
on both threat models, and the membership attack), side by side in one bench run, each
into an emptied folder. Goal: the audit at most 2x the run. ``quick``: 2 rounds.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from bench.bench_speed import _overrides, fedpriv_run, monitored_run

__all__ = ["audit_row", "fedpriv_audit"]

DEFAULT = {"scenario": "digits"}


def fedpriv_audit(values: dict, out: Path) -> dict:
    """One ``fedpriv audit`` with ``values`` (wall, peak RSS, its audit.json) into an emptied
    ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "fedpriv.scenarios.cli.main", "audit", "--run-config"]
    cmd.append(_overrides({**values, "output-dir": str(out)}))
    res = monitored_run(cmd)
    res["audit"] = json.loads((out / "audit.json").read_text())
    res["summary"] = json.loads((out / "summary.json").read_text())
    return res


def audit_row(tmp: Path, quick: bool) -> list[str]:
    """``fedpriv audit`` vs ``fedpriv run`` of the default config (module docstring)."""
    values = {**DEFAULT, **({"num-server-rounds": 2} if quick else {})}
    run = fedpriv_run(values, tmp / "audit-run")
    audit = fedpriv_audit(values, tmp / "audit-audit")
    found = audit["audit"]
    acc_run = run["summary"]["final"]["accuracy"]
    acc_audit = audit["summary"]["final"]["accuracy"]
    return [
        f"| audit: `fedpriv audit` vs `fedpriv run`, default config (digits, metric DP, "
        f"{'2' if quick else 'default'} rounds; {found['canaries']['count']} canaries, "
        f"denominator {found.get('canary_denominator')}) | {audit['wall']:.1f} s (acc "
        f"{acc_audit:.3f}; LB {found['epsilon_lower_bound']:.2f}) | {run['wall']:.1f} s (acc "
        f"{acc_run:.3f}) | **{audit['wall'] / run['wall']:.2f}x** (goal <= 2x) |"
    ]
